"""Azure VM control plane (azure-mgmt-compute, azure-mgmt-network, azure-identity).

Credentials come from `DefaultAzureCredential` (environment, managed identity, `az login`). A node
id is the VM's ARM id (`/subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/NAME`)
or its name, with the resource group from the options and the subscription from the options or
`AZURE_SUBSCRIPTION_ID`.

- State: the instance view's `PowerState/...` status (`deallocated` and `stopped` both read as
  stopped; `stop()` deallocates, so the compute is no longer billed).
- Stop/start: `begin_deallocate` / `begin_start` (waiting for the long-running operation), then polling.
- Preemption: `simulate_eviction` (spot VMs only), then waiting until the VM is stopped.
- Address: the primary NIC's IP configuration: its public IP resource's address, or the private one.
- Price: the Retail Prices API (no auth; the query is spoteval/price.py's, which the agent uses too),
  the Linux `Spot` meter for the VM size in the region, following `NextPageLink`; on-demand nodes or
  no meter: the configured price.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.mgmt.core.tools import is_valid_resource_id, parse_resource_id

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
from spoteval.price import (
    AZURE_PRICES_URL,
    Price,
    RetailPricesError,
    retail_filter,
    retail_items,
    retail_price,
    retail_prices_url,
)
from spoteval.providers import AZURE
from spoteval.providers import azure as azure_facts

__all__ = ["AzureOptions", "AzurePlane", "price_filter", "retail_items", "spot_price", "vm_resource_id"]

if TYPE_CHECKING:
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient

#: error codes of a start that mean no capacity (or quota) now (spoteval/providers/azure.py)
CAPACITY_CODES: Final = azure_facts.CAPACITY_CODES
_POWER_STATES: Final = {
    "starting": "pending",
    "running": "running",
    "stopping": "stopping",
    "deallocating": "stopping",
    "stopped": "stopped",
    "deallocated": "stopped",
}


def price_filter(region: str, sku: str) -> str:
    """The Retail Prices `$filter` for a VM size's spot meters in a region."""
    return retail_filter(region, sku)


def spot_price(items: Iterable[Mapping[str, Any]], sku: str) -> Price | None:
    """The Linux spot hourly price among the Retail Prices items of `sku`, or None."""
    return retail_price(i for i in items if i.get("armSkuName") == sku)


@dataclass(frozen=True)
class AzureOptions:
    """The azure plane's own options, for a node given by its VM name: `resource_group` (the stack's
    azure.resource_group) and `subscription` (else AZURE_SUBSCRIPTION_ID)."""

    subscription: str | None = None
    resource_group: str | None = None

    @classmethod
    def parse(cls, options: PlaneOptions) -> AzureOptions:
        return provider_options(cls, options, "azure")


def vm_resource_id(node: str, config: PlaneOptions) -> str:
    """The VM's ARM id: `node` itself, or a VM name with the config's (or environment's) subscription
    and the config's resource group."""
    if node.startswith("/"):
        parts = parse_resource_id(node) if is_valid_resource_id(node) else {}
        if str(parts.get("type", "")).lower() != "virtualmachines" or not parts.get("resource_group"):
            raise ControlPlaneError(f"azure node {node!r} is not an ARM resource id of a virtual machine")
        return node
    own = AzureOptions.parse(config)
    subscription = own.subscription or os.environ.get("AZURE_SUBSCRIPTION_ID")
    if not subscription or not own.resource_group or "/" in node:
        raise ControlPlaneError(
            f"azure node {node!r}: give the VM's ARM id, or its name with the resource group "
            "(the stack's azure.resource_group) and AZURE_SUBSCRIPTION_ID"
        )
    return (
        f"/subscriptions/{subscription}/resourceGroups/{own.resource_group}"
        f"/providers/Microsoft.Compute/virtualMachines/{node}"
    )


class AzurePlane:
    provider = "azure"
    restarts_itself = AZURE.restarts_itself
    can_stay_stopped = AZURE.can_stay_stopped

    def __init__(
        self,
        outputs: StackOutputs,
        node: str,
        config: PlaneOptions,
        compute: ComputeManagementClient,
        network: NetworkManagementClient | None = None,
        *,
        prices_url: str = AZURE_PRICES_URL,
        http_get: HttpGet = http_get_json,
    ) -> None:
        parts = parse_resource_id(vm_resource_id(node, config))
        self.outputs = outputs
        self.node = node
        self.config = config
        self.compute = compute
        self.network = network
        self.prices_url = prices_url
        self.http_get = http_get
        self.subscription = str(parts["subscription"])
        self.group = str(parts["resource_group"])
        self.name = str(parts["name"])

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> AzurePlane:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient

        subscription = str(parse_resource_id(vm_resource_id(node, config))["subscription"])
        credential = DefaultAzureCredential()
        compute = ComputeManagementClient(credential, subscription)
        try:
            from azure.mgmt.network import NetworkManagementClient
        except ImportError:
            network = None
        else:
            network = NetworkManagementClient(credential, subscription)
        return cls(outputs, node, config, compute, network)

    def _fail(self, verb: str, exc: AzureError) -> ControlPlaneError:
        message = exc.message if isinstance(exc, HttpResponseError) else str(exc)
        first = (message or type(exc).__name__).strip().splitlines()
        return ControlPlaneError(f"azure {verb} {self.group}/{self.name}: {first[0] if first else exc}")

    def state(self) -> NodeState:
        try:
            view = self.compute.virtual_machines.instance_view(self.group, self.name)
        except ResourceNotFoundError:
            raise ControlPlaneError(f"azure instance_view {self.group}/{self.name}: no such VM") from None
        except AzureError as exc:
            raise self._fail("instance_view", exc) from None
        for status in view.statuses or []:
            code = status.code or ""
            if code.startswith("PowerState/"):
                raw = code.split("/", 1)[1]
                return NodeState(_POWER_STATES.get(raw, "unknown"), raw)
        return NodeState("unknown", "no power state")

    def address(self) -> str | None:
        if self.network is None:
            raise ControlPlaneError("azure address: needs the azure-mgmt-network package")
        try:
            vm = self.compute.virtual_machines.get(self.group, self.name)
            profile = vm.properties.network_profile if vm.properties else None
            refs = list(profile.network_interfaces or []) if profile else []
            refs.sort(key=lambda r: not (r.properties and r.properties.primary))
            for ref in refs:
                if not ref.id:
                    continue
                nic_id = parse_resource_id(ref.id)
                nic = self.network.network_interfaces.get(str(nic_id["resource_group"]), str(nic_id["name"]))
                configs = list(nic.properties.ip_configurations or []) if nic.properties else []
                configs.sort(key=lambda c: not (c.properties and c.properties.primary))
                for ipc in configs:
                    props = ipc.properties
                    if props is None:
                        continue
                    private = props.private_ip_address
                    if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
                        return private
                    public_ref = props.public_ip_address
                    if public_ref is not None and public_ref.id:
                        pip_id = parse_resource_id(public_ref.id)
                        pip = self.network.public_ip_addresses.get(
                            str(pip_id["resource_group"]), str(pip_id["name"])
                        )
                        if pip.properties and pip.properties.ip_address:
                            return pip.properties.ip_address
                    return private
        except AzureError as exc:
            raise self._fail("address", exc) from None
        return None

    def price_now(self) -> Price:
        if self.outputs.market != "spot":
            return configured_price(self.config, reason="on-demand price is not read from an API")
        sku = self.outputs.instance_type
        url = retail_prices_url(self.prices_url, self.outputs.region, sku, currency=self.config.currency)
        try:
            price = spot_price(retail_items(url, self.http_get), sku)
        except RetailPricesError as exc:
            raise ControlPlaneError(str(exc)) from None
        if price is None:
            return configured_price(
                self.config, reason=f"no Linux spot meter for {sku} in {self.outputs.region}"
            )
        return price

    def _wait(self, want: str, timeout_s: float, verb: str) -> None:
        wait_for(
            self.state,
            {want},
            timeout_s=timeout_s,
            poll_s=self.config.poll_s,
            what=f"azure {verb} {self.group}/{self.name}",
        )

    def stop(self, timeout_s: float) -> None:
        if self.state().stopped:
            return
        try:
            self.compute.virtual_machines.begin_deallocate(self.group, self.name).result(timeout=timeout_s)
        except AzureError as exc:
            raise self._fail("deallocate", exc) from None
        self._wait("stopped", timeout_s, "deallocate")

    def start(self, timeout_s: float) -> None:
        current = self.state()
        if current.running:
            return
        if current.status == "stopping":
            self._wait("stopped", timeout_s, "start")
        try:
            self.compute.virtual_machines.begin_start(self.group, self.name).result(timeout=timeout_s)
        except AzureError as exc:
            failure = self._fail("start", exc)
            error = getattr(exc, "error", None)
            if isinstance(exc, HttpResponseError) and getattr(error, "code", None) in CAPACITY_CODES:
                raise CapacityError(f"{failure} ({getattr(error, 'code', '')})") from None
            raise failure from None
        self._wait("running", timeout_s, "start")

    def simulate_preemption(self, timeout_s: float) -> str:
        try:
            self.compute.virtual_machines.simulate_eviction(self.group, self.name)
        except AzureError as exc:
            raise self._fail("simulate_eviction", exc) from None
        self._wait("stopped", timeout_s, "simulate_eviction")
        return "simulate_eviction"
