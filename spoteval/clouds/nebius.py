"""Nebius AI Cloud control plane (the official `nebius` SDK, gRPC): preemptible VM state, stop, start.

Credentials: `NEBIUS_IAM_TOKEN` when set, else the Nebius CLI's profile (`~/.nebius/config.yaml`,
`NEBIUS_PROFILE`), as the SDK's config reader resolves it. A node id is the instance id
(`computeinstance-...`), which the stack exports as `node_ids`.

- State: `InstanceService.Get`; `status.state` RUNNING / STOPPED / STARTING / STOPPING / CREATING /
  UPDATING / DELETING / ERROR map onto the normalised states (a preempted instance with
  `on_preemption: STOP` is STOPPED, its volumes kept).
- Stop / start: `InstanceService.Stop` / `Start` through the API, then polling `Get` (the caller's
  credentials need `editor` on the project). The node itself powers off from inside when its run is
  done: with `recovery_policy: FAIL` the VM then stops and is not restarted (instance.proto).
- Price: spot VMs read the current spot price of the instance's platform in its region from
  `billing.v1alpha1.SpotPriceService.List` (no authentication needed): the SKU's price per unit,
  times the preset's GPUs when the unit is a GPU-hour (`price_source` `api`). The unit semantics of
  that alpha API are [unconfirmed]; when no single SKU matches (or for on-demand VMs), the
  configured price.
- Nebius has no API that preempts a VM on request: `simulate_preemption()` stops it.
- Address: the first network interface's public address (`status.network_interfaces[].
  public_ip_address.address`), or its private one for `address_kind` private.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final

from spoteval.clouds.base import (
    PRIVATE_ADDRESS_KINDS,
    CapacityError,
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    StackOutputs,
    check_option_keys,
    configured_price,
    wait_for,
)
from spoteval.price import Price
from spoteval.providers import NEBIUS
from spoteval.providers import nebius as nebius_facts

USER_AGENT: Final = "spot-eval/1"
TOKEN_ENV: Final = "NEBIUS_IAM_TOKEN"
CALL_TIMEOUT_S: Final = 30.0
_STATES: Final = {
    "CREATING": "pending",
    "UPDATING": "pending",
    "STARTING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "STOPPED": "stopped",
    "DELETING": "terminated",
    "ERROR": "unknown",
}
#: A start refused for lack of capacity or quota: gRPC RESOURCE_EXHAUSTED on the call or in the
#: operation's status, or these words in its message [unconfirmed: no Nebius page lists the start
#: errors of a preemptible VM; checked 2026-12-01]
CAPACITY_STATUS: Final = "RESOURCE_EXHAUSTED"
CAPACITY_WORDS: Final = ("resource_exhausted", "not enough resources", "no capacity", "quota")


def _strip_cidr(address: str) -> str:
    return address.split("/", 1)[0]


def gpus_of(instance_type: str) -> int:
    """GPUs of `PLATFORM/PRESET` (`gpu-h100-sxm/1gpu-16vcpu-200gb` -> 1); 1 when the preset says none
    (the rule is a fact of spoteval/providers/nebius.py)."""
    return nebius_facts.gpus_of(instance_type)


def spot_price(items: Iterable[Any], region: str, platform: str, gpus: int) -> Price | None:
    """The per-hour price of `gpus` GPUs of `platform` in `region` from SpotPriceService items."""
    matches = [
        item
        for item in items
        if item.region == region
        and item.compute_instance is not None
        and item.compute_instance.platform == platform
    ]
    if len(matches) != 1 or matches[0].price is None:
        return None
    item = matches[0]
    try:
        value = float(item.price.value)
    except (TypeError, ValueError):
        return None
    unit = str(item.price.unit_title or "")
    per_gpu = "gpu" in unit.lower()
    total = value * gpus if per_gpu else value
    details = {"sku": item.sku_id, "product": item.product_title, "unit": unit, "per_unit": value}
    return Price(round(total, 6), str(item.price.currency or "USD"), "api", details)


class NebiusPlane:
    provider = "nebius"
    restarts_itself = NEBIUS.restarts_itself
    can_stay_stopped = NEBIUS.can_stay_stopped

    def __init__(self, outputs: StackOutputs, node: str, config: PlaneOptions, sdk: Any) -> None:
        from nebius.api.nebius.billing.v1alpha1 import SpotPriceServiceClient
        from nebius.api.nebius.compute.v1 import InstanceServiceClient

        check_option_keys(config.own("nebius"), (), "nebius")  # the plane takes no options of its own
        self.outputs = outputs
        self.node = node
        self.config = config
        self.sdk = sdk
        self.instances = InstanceServiceClient(sdk)
        self.spot_prices = SpotPriceServiceClient(sdk)

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> NebiusPlane:
        try:
            from nebius.base.error import SDKError
            from nebius.sdk import SDK
        except ImportError:
            raise ControlPlaneError(
                "nebius: the `nebius` SDK is not installed (pip install nebius)"
            ) from None
        try:
            if os.environ.get(TOKEN_ENV):
                sdk = SDK(credentials=os.environ[TOKEN_ENV], user_agent_prefix=USER_AGENT)
            else:
                from nebius.aio.cli_config import Config

                sdk = SDK(config_reader=Config(), user_agent_prefix=USER_AGENT)
        except (SDKError, OSError, ValueError) as exc:
            raise ControlPlaneError(
                f"nebius: no credentials ({TOKEN_ENV}, or a Nebius CLI profile): {exc}"
            ) from None
        return cls(outputs, node, config, sdk)

    def _call(self, what: str, request: Any) -> Any:
        import grpc  # type: ignore[import-untyped,unused-ignore]
        from nebius.base.error import SDKError

        try:
            return request.wait()
        except (SDKError, grpc.RpcError, OSError, TimeoutError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ControlPlaneError(f"{what}: {text}") from None

    def _get(self) -> Any:
        from nebius.api.nebius.compute.v1 import GetInstanceRequest

        return self._call(
            f"nebius get {self.node}",
            self.instances.get(GetInstanceRequest(id=self.node), timeout=CALL_TIMEOUT_S),
        )

    def state(self) -> NodeState:
        instance = self._get()
        status = instance.status
        raw = status.state.name if status is not None and status.state is not None else "UNSPECIFIED"
        details: dict[str, Any] = {}
        if status is not None and status.reconciling:
            details["reconciling"] = True
        return NodeState(_STATES.get(raw, "unknown"), raw, details)

    def address(self) -> str | None:
        instance = self._get()
        interfaces = list(instance.status.network_interfaces) if instance.status is not None else []
        if not interfaces:
            return None
        first = interfaces[0]
        private = (
            _strip_cidr(first.ip_address.address) if first.ip_address and first.ip_address.address else None
        )
        if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
            return private
        for interface in interfaces:
            public = interface.public_ip_address
            if public is not None and public.address:
                return _strip_cidr(public.address)
        return private

    def price_now(self) -> Price:
        if self.outputs.market != "spot":
            return configured_price(self.config, reason="on-demand prices are not read from an API")
        from nebius.api.nebius.billing.v1alpha1 import ListSpotPricesRequest

        platform = self.outputs.instance_type.split("/", 1)[0]
        items: list[Any] = []
        token = ""
        for _ in range(100):
            page = self._call(
                "nebius spot prices",
                self.spot_prices.list(
                    ListSpotPricesRequest(page_size=1000, page_token=token), timeout=CALL_TIMEOUT_S
                ),
            )
            items.extend(page.items)
            token = page.next_page_token
            if not token:
                break
        price = spot_price(items, self.outputs.region, platform, gpus_of(self.outputs.instance_type))
        if price is None:
            return configured_price(
                self.config, reason=f"no single spot price for {platform} in {self.outputs.region}"
            )
        return price

    def _act(self, verb: str, timeout_s: float) -> None:
        from nebius.api.nebius.compute.v1 import StartInstanceRequest, StopInstanceRequest

        what = f"nebius {verb} {self.node}"
        timeout = min(timeout_s, CALL_TIMEOUT_S)
        call: Any
        if verb == "stop":
            call = self.instances.stop(StopInstanceRequest(id=self.node), timeout=timeout)
        else:
            call = self.instances.start(StartInstanceRequest(id=self.node), timeout=timeout)
        try:
            operation = self._call(what, call)
        except ControlPlaneError as exc:
            if verb == "start" and any(w in str(exc).lower() for w in CAPACITY_WORDS):
                raise CapacityError(str(exc)) from None
            raise
        if operation.done() and not operation.successful():
            status = operation.status()
            code = getattr(status, "code", None)
            text = f"{what}: the operation failed: {status}"
            named = str(getattr(code, "name", code))
            capacity = named == CAPACITY_STATUS or any(w in text.lower() for w in CAPACITY_WORDS)
            raise (CapacityError if verb == "start" and capacity else ControlPlaneError)(text)

    def stop(self, timeout_s: float) -> None:
        what = f"nebius stop {self.node}"
        current = self.state()
        if current.stopped:
            return
        if current.status != "stopping":
            self._act("stop", timeout_s)
        wait_for(self.state, {"stopped"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)

    def start(self, timeout_s: float) -> None:
        what = f"nebius start {self.node}"
        current = self.state()
        if current.running:
            return
        if current.status == "stopping":
            current = wait_for(
                self.state, {"stopped"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what
            )
        if current.status == "stopped":
            self._act("start", timeout_s)
        wait_for(self.state, {"running"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)

    def simulate_preemption(self, timeout_s: float) -> str:
        self.stop(timeout_s)
        return "stop"
