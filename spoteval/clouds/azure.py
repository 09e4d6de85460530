"""Azure VM control plane (azure-mgmt-compute, azure-mgmt-network, azure-identity).

Credentials come from `DefaultAzureCredential` (environment, managed identity, `az login`). A node
id is the VM's ARM id (`/subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/NAME`)
or its name, with the resource group from the config and the subscription from the config or
`AZURE_SUBSCRIPTION_ID`.

- State: the instance view's `PowerState/...` status (`deallocated` and `stopped` both read as
  stopped; `stop()` deallocates, so the compute is no longer billed).
- Stop/start: `begin_deallocate` / `begin_start` (waiting for the long-running operation), then polling.
- Preemption: `simulate_eviction` (spot VMs only), then waiting until the VM is stopped.
- Address: the primary NIC's IP configuration: its public IP resource's address, or the private one.
- Price: the Retail Prices API (no auth), the Linux `Spot` meter for the VM size in the region,
  following `NextPageLink`; on-demand nodes or no meter: the configured price.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.mgmt.core.tools import is_valid_resource_id, parse_resource_id

from spoteval.clouds import (
    PRIVATE_ADDRESS_KINDS,
    ControlPlaneError,
    HttpGet,
    NodeState,
    PlaneConfig,
    Price,
    StackOutputs,
    configured_price,
    http_get_json,
    wait_for,
)

if TYPE_CHECKING:
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient

PRICES_URL: Final = "https://prices.azure.com/api/retail/prices"
PRICES_API_VERSION: Final = "2023-01-01-preview"
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
    return (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{sku}' "
        "and priceType eq 'Consumption' and contains(meterName,'Spot')"
    )


def retail_items(first_url: str, http_get: HttpGet, max_pages: int = 100) -> Iterator[Mapping[str, Any]]:
    """Every item of a Retail Prices query, following `NextPageLink`."""
    url: str | None = first_url
    for _ in range(max_pages):
        if not url:
            return
        page = http_get(url)
        items = page.get("Items") or []
        if not isinstance(items, list):
            raise ControlPlaneError("azure Retail Prices: `Items` is not a list")
        yield from (i for i in items if isinstance(i, Mapping))
        link = page.get("NextPageLink")
        url = link if isinstance(link, str) and link else None
    if url:
        raise ControlPlaneError(f"azure Retail Prices: more than {max_pages} pages")


def spot_price(items: Iterable[Mapping[str, Any]], sku: str) -> Price | None:
    """The Linux spot hourly price among Retail Prices items (newest effective date wins), or None."""
    best: Mapping[str, Any] | None = None
    for item in items:
        if item.get("armSkuName") != sku or "Spot" not in str(item.get("meterName", "")):
            continue
        if "Windows" in str(item.get("productName", "")) or item.get("type", "Consumption") != "Consumption":
            continue
        if str(item.get("unitOfMeasure", "1 Hour")) != "1 Hour":
            continue
        if not isinstance(item.get("retailPrice"), int | float):
            continue
        if best is None or str(item.get("effectiveStartDate", "")) > str(best.get("effectiveStartDate", "")):
            best = item
    if best is None:
        return None
    return Price(
        float(best["retailPrice"]),
        str(best.get("currencyCode") or "USD"),
        "api",
        {
            "meter": best.get("meterName"),
            "product": best.get("productName"),
            "since": best.get("effectiveStartDate"),
        },
    )


def vm_resource_id(node: str, config: PlaneConfig) -> str:
    """The VM's ARM id: `node` itself, or a VM name with the config's (or environment's) subscription
    and the config's resource group."""
    if node.startswith("/"):
        parts = parse_resource_id(node) if is_valid_resource_id(node) else {}
        if str(parts.get("type", "")).lower() != "virtualmachines" or not parts.get("resource_group"):
            raise ControlPlaneError(f"azure node {node!r} is not an ARM resource id of a virtual machine")
        return node
    subscription = config.azure_subscription or os.environ.get("AZURE_SUBSCRIPTION_ID")
    if not subscription or not config.azure_resource_group or "/" in node:
        raise ControlPlaneError(
            f"azure node {node!r}: give the VM's ARM id, or its name with the resource group "
            "(the stack's azure.resource_group) and AZURE_SUBSCRIPTION_ID"
        )
    return (
        f"/subscriptions/{subscription}/resourceGroups/{config.azure_resource_group}"
        f"/providers/Microsoft.Compute/virtualMachines/{node}"
    )


class AzurePlane:
    provider = "azure"
    restarts_itself = False
    can_stay_stopped = True

    def __init__(
        self,
        outputs: StackOutputs,
        node: str,
        config: PlaneConfig,
        compute: ComputeManagementClient,
        network: NetworkManagementClient | None = None,
        *,
        prices_url: str = PRICES_URL,
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
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneConfig) -> AzurePlane:
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
        query = urllib.parse.urlencode(
            {
                "api-version": PRICES_API_VERSION,
                "currencyCode": f"'{self.config.currency}'",
                "$filter": price_filter(self.outputs.region, sku),
            },
            quote_via=urllib.parse.quote,
        )
        price = spot_price(retail_items(f"{self.prices_url}?{query}", self.http_get), sku)
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
            raise self._fail("start", exc) from None
        self._wait("running", timeout_s, "start")

    def simulate_preemption(self, timeout_s: float) -> str:
        try:
            self.compute.virtual_machines.simulate_eviction(self.group, self.name)
        except AzureError as exc:
            raise self._fail("simulate_eviction", exc) from None
        self._wait("stopped", timeout_s, "simulate_eviction")
        return "simulate_eviction"
