"""GCP Compute Engine control plane (google-cloud-compute): state, stop/start, address, Catalog price.

Credentials come from Application Default Credentials. A node id is the instance's resource path
(`projects/P/zones/Z/instances/NAME`, optionally as a full URL) or a bare name, with the project
from the options (`GcpOptions.project`, else `GOOGLE_CLOUD_PROJECT`) and the zone from the outputs.

- State: the instance's `status`; GCP's `TERMINATED` is a stopped instance (disks kept).
- Stop/start: `instances.stop` / `instances.start` (waiting for the operation), then polling.
  GCP has no API to preempt a VM on request: `simulate_preemption()` stops it, as
  `gcloud compute instances stop` does in GCP's own advice.
- Price: with a Cloud Billing API key, the Catalog's Compute Engine SKUs
  (`spoteval.apis.gcp_billing`): the machine type's vCPUs x the family's
  "Spot Preemptible <FAMILY> Instance Core" price + its GiB of memory x the "... Instance Ram" price
  + each GPU x the "Spot Preemptible <GPU> GPU" price, for SKUs whose `serviceRegions` list the
  region. Without a key, or when a part has no SKU: the configured price.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import compute_v1

from spoteval.apis import gcp_billing
from spoteval.apis.gcp_billing import CATALOG_URL as CATALOG_URL  # noqa: PLC0414 (re-exported)
from spoteval.apis.gcp_billing import SPOT, MachineShape, shape_price
from spoteval.clouds.base import (
    PRIVATE_ADDRESS_KINDS,
    CapacityError,
    ControlPlaneError,
    HttpGet,
    NodeState,
    PlaneOptions,
    StackOutputs,
    configured_price,
    http_get_json,
    provider_options,
    wait_for,
)
from spoteval.price import Price
from spoteval.providers import GCP
from spoteval.providers import gcp as gcp_facts

_STATES: Final = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "REPAIRING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "STOPPED": "stopped",
    "SUSPENDED": "stopped",
    "TERMINATED": "stopped",
}
_PATH = re.compile(r"(?:^|/)projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$")
#: error codes of a start that mean no capacity (or quota) now (spoteval/providers/gcp.py)
CAPACITY_CODES: Final = gcp_facts.CAPACITY_CODES


def catalog_price(skus: Iterable[Mapping[str, Any]], region: str, shape: MachineShape) -> Price | None:
    """The spot price of `shape` in `region` from Catalog SKUs, or None when a part has no SKU."""
    found = shape_price(skus, region, shape, SPOT)
    if found is None:
        return None
    return Price(found.per_hour, found.currency, "api", {"skus": list(found.skus), "region": region})


@dataclass(frozen=True)
class GcpOptions:
    """The gcp plane's own options: `project` (for a node given by its name; else
    GOOGLE_CLOUD_PROJECT) and `billing_api_key` (reads the spot price from the Catalog)."""

    project: str | None = None
    billing_api_key: str | None = None

    @classmethod
    def parse(cls, options: PlaneOptions) -> GcpOptions:
        return provider_options(cls, options, "gcp")


class GcpPlane:
    provider = "gcp"
    restarts_itself = GCP.restarts_itself
    can_stay_stopped = GCP.can_stay_stopped

    def __init__(
        self,
        outputs: StackOutputs,
        node: str,
        config: PlaneOptions,
        instances: compute_v1.InstancesClient,
        machine_types: compute_v1.MachineTypesClient | None = None,
        *,
        catalog_url: str = CATALOG_URL,
        http_get: HttpGet = http_get_json,
    ) -> None:
        self.outputs = outputs
        self.node = node
        self.config = config
        self.own = GcpOptions.parse(config)
        self.instances = instances
        self.machine_types = machine_types
        self.catalog_url = catalog_url.rstrip("/")
        self.http_get = http_get
        m = _PATH.search(node)
        if m:
            self.project, self.zone, self.name = m["project"], m["zone"], m["name"]
        else:
            project = self.own.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
            if not project or not outputs.zone or "/" in node:
                raise ControlPlaneError(
                    f"gcp node {node!r}: give projects/P/zones/Z/instances/NAME, or a name with the "
                    "outputs' zone and GOOGLE_CLOUD_PROJECT set"
                )
            self.project, self.zone, self.name = project, outputs.zone, node

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> GcpPlane:
        own = GcpOptions.parse(config)
        try:
            instances = compute_v1.InstancesClient()
            machine_types = compute_v1.MachineTypesClient() if own.billing_api_key else None
        except (auth_exc.GoogleAuthError, ValueError) as exc:
            raise ControlPlaneError(f"gcp: cannot create the Compute client: {exc}") from None
        return cls(outputs, node, config, instances, machine_types)

    @property
    def _where(self) -> str:
        return f"{self.project}/{self.zone}/{self.name}"

    def _get(self) -> compute_v1.Instance:
        try:
            return self.instances.get(project=self.project, zone=self.zone, instance=self.name)
        except gexc.NotFound:
            raise ControlPlaneError(f"gcp get {self._where}: no such instance") from None
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            raise ControlPlaneError(f"gcp get {self._where}: {exc}") from None

    def state(self) -> NodeState:
        raw = str(self._get().status or "UNKNOWN")
        return NodeState(_STATES.get(raw, "unknown"), raw)

    def address(self) -> str | None:
        instance = self._get()
        interfaces = list(instance.network_interfaces)
        if not interfaces:
            return None
        private = interfaces[0].network_i_p or None
        if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
            return private
        for interface in interfaces:
            for config in interface.access_configs:
                if config.nat_i_p:
                    return str(config.nat_i_p)
        return private

    # --- price --------------------------------------------------------------------------------

    def _shape(self, instance: compute_v1.Instance) -> MachineShape:
        machine = instance.machine_type.rsplit("/", 1)[-1] or self.outputs.instance_type
        family = machine.split("-", 1)[0].lower()
        gpus: dict[str, int] = {}
        for acc in instance.guest_accelerators:
            name = acc.accelerator_type.rsplit("/", 1)[-1]
            gpus[name] = gpus.get(name, 0) + int(acc.accelerator_count)
        if self.machine_types is None:
            raise ControlPlaneError("gcp price: no MachineTypes client")
        try:
            mt = self.machine_types.get(project=self.project, zone=self.zone, machine_type=machine)
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            raise ControlPlaneError(f"gcp machine type {machine} in {self.zone}: {exc}") from None
        for acc2 in mt.accelerators:
            name = acc2.guest_accelerator_type
            gpus[name] = gpus.get(name, 0) + int(acc2.guest_accelerator_count)
        return MachineShape(family, int(mt.guest_cpus), int(mt.memory_mb) / 1024, tuple(sorted(gpus.items())))

    def _skus(self) -> Iterator[Mapping[str, Any]]:
        return gcp_billing.skus(
            self.http_get,
            self.own.billing_api_key or "",
            self.config.currency,
            ControlPlaneError,
            catalog_url=self.catalog_url,
            label="gcp Catalog",
        )

    def price_now(self) -> Price:
        if not self.own.billing_api_key:
            return configured_price(self.config, reason="no Cloud Billing API key configured")
        if self.outputs.market != "spot":
            return configured_price(self.config, reason="only spot prices are read from the Catalog")
        shape = self._shape(self._get())
        skus = [s for s in self._skus() if (s.get("category") or {}).get("usageType") == "Preemptible"]
        price = catalog_price(skus, self.outputs.region, shape)
        if price is None:
            return configured_price(
                self.config,
                reason=f"the Catalog has no complete spot price for {shape.family} in {self.outputs.region}",
            )
        return Price(price.per_hour, price.currency, "api", {**price.details, "machine": shape.__dict__})

    # --- acting -------------------------------------------------------------------------------

    def _run(self, verb: str, timeout_s: float) -> None:
        what = f"gcp {verb} {self._where}"
        call = self.instances.stop if verb == "stop" else self.instances.start
        try:
            operation = call(project=self.project, zone=self.zone, instance=self.name)
            operation.result(timeout=timeout_s)  # type: ignore[no-untyped-call]
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            capacity = verb == "start" and any(code in str(exc) for code in CAPACITY_CODES)
            raise (CapacityError if capacity else ControlPlaneError)(f"{what}: {exc}") from None
        except TimeoutError:
            raise ControlPlaneError(f"{what}: the operation did not finish in {timeout_s:g} s") from None

    def stop(self, timeout_s: float) -> None:
        if self.state().stopped:
            return
        self._run("stop", timeout_s)
        wait_for(
            self.state,
            {"stopped"},
            timeout_s=timeout_s,
            poll_s=self.config.poll_s,
            what=f"gcp stop {self._where}",
        )

    def start(self, timeout_s: float) -> None:
        current = self.state()
        if current.running:
            return
        if current.status == "stopping":
            wait_for(
                self.state,
                {"stopped"},
                timeout_s=timeout_s,
                poll_s=self.config.poll_s,
                what=f"gcp start {self._where}",
            )
        self._run("start", timeout_s)
        wait_for(
            self.state,
            {"running"},
            timeout_s=timeout_s,
            poll_s=self.config.poll_s,
            what=f"gcp start {self._where}",
        )

    def simulate_preemption(self, timeout_s: float) -> str:
        self.stop(timeout_s)
        return "stop"
