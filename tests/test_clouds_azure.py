"""Azure control plane: azure-mgmt-compute and azure-mgmt-network against a loopback ARM API (through
a transport that sends the SDK's https://management.azure.com requests there), and the Retail
Prices API's pages served the same way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpRequest, HttpResponse, RequestsTransport
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient

from spoteval.clouds import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.clouds.azure import AzurePlane, price_filter, retail_items, spot_price
from tests.fake_api import FakeApi, Reply, Request

SUB, RG, VM = "0000-sub", "evals-rg", "gpu-vm"
ARM = "https://management.azure.com"
VM_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{VM}"
NIC_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/networkInterfaces/gpu-nic"
PIP_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/publicIPAddresses/gpu-ip"
OPS = f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus/operations"
SKU = "Standard_NC4as_T4_v3"


class LoopbackTransport(RequestsTransport):  # type: ignore[misc]
    """Sends the SDK's ARM requests (built for https://management.azure.com) to the loopback fake."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        request.url = request.url.replace(ARM, self.url)
        response: HttpResponse = super().send(request, **kwargs)
        return response


class FakeCredential:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("fake-token", int(time.time()) + 3600)


def retail_item(
    price: float,
    *,
    meter: str = "NC4as T4 v3 Spot",
    product: str = "Virtual Machines NCasT4_v3 Series",
    since: str = "2026-06-01T00:00:00Z",
) -> dict[str, Any]:
    """A Retail Prices item as the API returns it."""
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": "eastus",
        "location": "US East",
        "effectiveStartDate": since,
        "meterName": meter,
        "productName": product,
        "skuName": meter,
        "serviceName": "Virtual Machines",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "isPrimaryMeterRegion": True,
        "armSkuName": SKU,
    }


class Arm:
    """One VM: deallocate/start are long-running operations; the power state follows `delay` s later."""

    def __init__(self, delay: float = 0.15) -> None:
        self.delay = delay
        self.power = "running"
        self.next_power: tuple[float, str] | None = None
        self.ip = 1
        self.polls: dict[str, int] = {}
        self.start_error: dict[str, Any] | None = None
        self.url = ""

    def current(self) -> str:
        if self.next_power and time.monotonic() >= self.next_power[0]:
            self.power = self.next_power[1]
            self.next_power = None
        return self.power

    def change(self, now: str, then: str) -> None:
        self.power = now
        self.next_power = (time.monotonic() + self.delay, then)

    def lro(self, name: str) -> Reply:
        self.polls[name] = 0
        return 202, None, {"Azure-AsyncOperation": f"{ARM}{OPS}/{name}?api-version=2026-04-01"}

    def handle(self, r: Request) -> Reply:
        assert "api-version" in r.query or r.path.startswith("/api/retail")
        if r.method == "GET" and r.path == f"{VM_ID}/instanceView":
            return (
                200,
                {
                    "statuses": [
                        {"code": "ProvisioningState/succeeded", "level": "Info"},
                        {"code": f"PowerState/{self.current()}", "level": "Info"},
                    ]
                },
                {},
            )
        if r.method == "GET" and r.path == VM_ID:
            return (
                200,
                {
                    "id": VM_ID,
                    "name": VM,
                    "location": "eastus",
                    "properties": {
                        "priority": "Spot",
                        "evictionPolicy": "Deallocate",
                        "networkProfile": {
                            "networkInterfaces": [{"id": NIC_ID, "properties": {"primary": True}}]
                        },
                    },
                },
                {},
            )
        if r.method == "GET" and r.path == NIC_ID:
            return (
                200,
                {
                    "id": NIC_ID,
                    "name": "gpu-nic",
                    "location": "eastus",
                    "properties": {
                        "ipConfigurations": [
                            {
                                "id": f"{NIC_ID}/ipConfigurations/ipconfig1",
                                "name": "ipconfig1",
                                "properties": {
                                    "primary": True,
                                    "privateIPAddress": "10.1.0.4",
                                    "publicIPAddress": {"id": PIP_ID},
                                },
                            }
                        ]
                    },
                },
                {},
            )
        if r.method == "GET" and r.path == PIP_ID:
            props: dict[str, Any] = {"publicIPAllocationMethod": "Dynamic"}
            if self.current() == "running":
                props["ipAddress"] = f"20.1.2.{self.ip}"
            return 200, {"id": PIP_ID, "name": "gpu-ip", "location": "eastus", "properties": props}, {}
        if r.method == "POST" and r.path == f"{VM_ID}/deallocate":
            self.change("deallocating", "deallocated")
            return self.lro("dealloc")
        if r.method == "POST" and r.path == f"{VM_ID}/start":
            if self.start_error:
                return 409, {"error": self.start_error}, {}
            self.ip += 1
            self.change("starting", "running")
            return self.lro("start")
        if r.method == "POST" and r.path == f"{VM_ID}/simulateEviction":
            self.change("deallocating", "deallocated")
            return 204, None, {}
        if r.method == "GET" and r.path.startswith(OPS + "/"):
            name = r.path.rsplit("/", 1)[1]
            self.polls[name] += 1
            status = "InProgress" if self.polls[name] < 2 else "Succeeded"
            return 200, {"name": name, "status": status, "startTime": "2026-11-30T05:00:00Z"}, {}
        if r.method == "GET" and r.path == "/api/retail/prices":
            if r.query.get("$skip") == "100":
                items = [retail_item(0.2, since="2025-01-01T00:00:00Z"), retail_item(0.1234)]
                return 200, {"BillingCurrency": "USD", "Items": items, "NextPageLink": None, "Count": 2}, {}
            items = [
                retail_item(0.31, product="Virtual Machines NCasT4_v3 Series Windows"),
                retail_item(0.09, meter="NC4as T4 v3 Low Priority"),
            ]
            link = f"{self.url}/api/retail/prices?api-version=2023-01-01-preview&$skip=100"
            return 200, {"BillingCurrency": "USD", "Items": items, "NextPageLink": link, "Count": 2}, {}
        return 404, {"error": {"code": "NotFound", "message": f"no route {r.method} {r.path}"}}, {}


@pytest.fixture
def arm() -> Iterator[tuple[Arm, FakeApi]]:
    state = Arm()
    api = FakeApi(state.handle)
    state.url = api.url
    try:
        yield state, api
    finally:
        api.close()


def outputs(market: str = "spot", address_kind: str = "public") -> StackOutputs:
    return StackOutputs.parse(
        {
            "provider": "azure",
            "region": "eastus",
            "zone": "1",
            "node_ids": [VM_ID],
            "instance_type": SKU,
            "market": market,
            "bucket_url": "az://results/evals",
            "run_id": "r1",
            "server_port": 8000,
            "address_kind": address_kind,
        }
    )


def plane(api: FakeApi, *, price: float | None = 0.4, **kw: Any) -> AzurePlane:
    credential = FakeCredential()
    compute = ComputeManagementClient(
        credential,
        SUB,
        transport=LoopbackTransport(api.url),
        polling_interval=0.01,
    )
    network = NetworkManagementClient(credential, SUB, transport=LoopbackTransport(api.url))
    return AzurePlane(
        outputs(**kw),
        VM_ID,
        PlaneOptions(configured_price=price, poll_s=0.02),
        compute,
        network,
        prices_url=f"{api.url}/api/retail/prices",
    )


def test_state_reads_the_power_state_from_the_instance_view(arm: tuple[Arm, FakeApi]) -> None:
    state, api = arm
    p = plane(api)
    assert (p.state().status, p.state().raw) == ("running", "running")
    state.power = "deallocated"
    assert (p.state().status, p.state().raw) == ("stopped", "deallocated")
    state.power = "starting"
    assert p.state().status == "pending"


def test_address_is_the_primary_nics_public_ip(arm: tuple[Arm, FakeApi]) -> None:
    _, api = arm
    assert plane(api).address() == "20.1.2.1"
    assert plane(api, address_kind="private").address() == "10.1.0.4"


def test_stop_deallocates_through_the_long_running_operation(arm: tuple[Arm, FakeApi]) -> None:
    state, api = arm
    p = plane(api)
    p.stop(timeout_s=5)
    assert p.state().raw == "deallocated"
    assert len(api.calls("POST", "/deallocate")) == 1
    assert state.polls["dealloc"] == 2  # the SDK followed Azure-AsyncOperation until Succeeded


def test_start_waits_for_running_and_the_dynamic_ip_changes(arm: tuple[Arm, FakeApi]) -> None:
    state, api = arm
    p = plane(api)
    p.stop(timeout_s=5)
    p.start(timeout_s=5)
    assert p.state().running
    assert p.address() == "20.1.2.2"
    assert state.polls["start"] == 2


def test_start_without_capacity_names_the_error(arm: tuple[Arm, FakeApi]) -> None:
    state, api = arm
    p = plane(api)
    p.stop(timeout_s=5)
    state.start_error = {"code": "AllocationFailed", "message": "Allocation failed. Not enough capacity."}
    with pytest.raises(ControlPlaneError, match=rf"azure start {RG}/{VM}: .*AllocationFailed"):
        p.start(timeout_s=5)


def test_preemption_is_simulate_eviction_then_deallocated(arm: tuple[Arm, FakeApi]) -> None:
    _, api = arm
    p = plane(api)
    assert p.simulate_preemption(timeout_s=5) == "simulate_eviction"
    assert len(api.calls("POST", "/simulateEviction")) == 1
    assert p.state().stopped


def test_price_follows_next_page_link_and_takes_the_newest_linux_spot_meter(arm: tuple[Arm, FakeApi]) -> None:
    _, api = arm
    price = plane(api).price_now()
    assert (price.per_hour, price.currency, price.source) == (0.1234, "USD", "api")
    assert price.details["meter"] == "NC4as T4 v3 Spot"
    first, second = api.calls("GET", "/api/retail/prices")
    assert first.query["$filter"] == price_filter("eastus", SKU)
    assert first.query["currencyCode"] == "'USD'"
    assert second.query["$skip"] == "100"


def test_on_demand_price_is_the_configured_one(arm: tuple[Arm, FakeApi]) -> None:
    _, api = arm
    price = plane(api, market="on_demand").price_now()
    assert (price.per_hour, price.source) == (0.4, "configured")


def test_no_spot_meter_falls_back_to_the_configured_price() -> None:
    assert spot_price([retail_item(0.3, product="Virtual Machines NCasT4_v3 Series Windows")], SKU) is None


def test_retail_pages_stop_at_the_last_page() -> None:
    pages = {
        "u1": {"Items": [{"a": 1}], "NextPageLink": "u2"},
        "u2": {"Items": [{"a": 2}], "NextPageLink": ""},
    }
    assert [i["a"] for i in retail_items("u1", lambda url: pages[url])] == [1, 2]


def test_node_as_a_vm_name_needs_the_resource_group_and_subscription(
    arm: tuple[Arm, FakeApi], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, api = arm
    compute = plane(api).compute
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(ControlPlaneError, match="resource group"):
        AzurePlane(outputs(), VM, PlaneOptions(providers={"azure": {"resource_group": RG}}), compute)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUB)
    by_name = AzurePlane(outputs(), VM, PlaneOptions(providers={"azure": {"resource_group": RG}}), compute)
    assert by_name.state().running  # the same VM, found from its name as the Pulumi outputs give it
    with pytest.raises(ControlPlaneError, match="not an ARM resource id"):
        AzurePlane(outputs(), "/subscriptions/x", PlaneOptions(), compute)
