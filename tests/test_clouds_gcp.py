"""GCP control plane: google-cloud-compute's REST client against a loopback Compute API, and the
Cloud Billing Catalog's SKU format served the same way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from spoteval.apis.gcp_billing import COMPUTE_SERVICE, MachineShape, gpu_tokens, unit_price
from spoteval.clouds import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.clouds.gcp import GcpPlane, catalog_price
from tests.fake_api import FakeApi, Reply, Request

PROJECT, ZONE, NAME = "evals-prj", "us-central1-a", "gpu-1"
BASE = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}"
NODE = f"projects/{PROJECT}/zones/{ZONE}/instances/{NAME}"
KEY = "test-api-key"


def sku(
    description: str,
    units: int,
    nanos: int,
    unit: str = "h",
    usage: str = "Preemptible",
    regions: tuple[str, ...] = ("us-central1",),
) -> dict[str, Any]:
    """A Catalog SKU as the Cloud Billing API returns it."""
    return {
        "name": f"services/{COMPUTE_SERVICE}/skus/X",
        "skuId": "X",
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "GPU" if "GPU" in description else "CPU",
            "usageType": usage,
        },
        "serviceRegions": list(regions),
        "pricingInfo": [
            {
                "effectiveTime": "2026-11-29T00:00:00Z",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                },
            }
        ],
    }


PAGE_1 = [
    sku("G2 Instance Core running in Americas", 0, 24_000_000, usage="OnDemand"),  # not spot
    sku("Spot Preemptible G2 Instance Core running in Americas", 0, 8_000_000),
    sku("Spot Preemptible G2 Instance Core running in Belgium", 0, 9_000_000, regions=("europe-west1",)),
    sku("Spot Preemptible G2 Custom Instance Core running in Americas", 0, 11_000_000),
    sku("Spot Preemptible Nvidia L4 GPU Virtual Workstation running in Americas", 0, 300_000_000),
]
PAGE_2 = [
    sku("Spot Preemptible G2 Instance Ram running in Americas", 0, 940_000, unit="GiBy.h"),
    sku("Spot Preemptible Nvidia L4 GPU running in Americas", 0, 224_000_000),
]
EXPECTED = 8 * 0.008 + 32 * 0.00094 + 1 * 0.224


class Compute:
    """One instance; stop/start operations finish at once, the status follows `delay` s later."""

    def __init__(self, delay: float = 0.15) -> None:
        self.delay = delay
        self.status = "RUNNING"
        self.next_status: tuple[float, str] | None = None
        self.nat = 1
        self.start_error: dict[str, Any] | None = None

    def current(self) -> str:
        if self.next_status and time.monotonic() >= self.next_status[0]:
            self.status = self.next_status[1]
            self.next_status = None
        return self.status

    def instance(self) -> dict[str, Any]:
        return {
            "kind": "compute#instance",
            "id": "123",
            "name": NAME,
            "status": self.current(),
            "machineType": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/machineTypes/g2-standard-8",
            "networkInterfaces": [
                {
                    "name": "nic0",
                    "networkIP": "10.128.0.5",
                    "accessConfigs": [
                        {"type": "ONE_TO_ONE_NAT", "name": "External NAT", "natIP": f"34.1.2.{self.nat}"}
                    ]
                    if self.status == "RUNNING"
                    else [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}],
                }
            ],
        }

    def operation(self, kind: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": "9",
            "name": f"operation-{kind}",
            "operationType": kind,
            "status": "DONE",
            "zone": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}",
            "targetLink": f"https://www.googleapis.com/compute/v1/{NODE}",
        }
        if error:
            op.update(error)
        return op

    def handle(self, r: Request) -> Reply:
        if r.method == "GET" and r.path == f"{BASE}/instances/{NAME}":
            return 200, self.instance(), {}
        if r.method == "POST" and r.path == f"{BASE}/instances/{NAME}/stop":
            self.status = "STOPPING"
            self.next_status = (time.monotonic() + self.delay, "TERMINATED")
            return 200, self.operation("stop"), {}
        if r.method == "POST" and r.path == f"{BASE}/instances/{NAME}/start":
            if self.start_error:
                return 200, self.operation("start", self.start_error), {}
            self.status = "STAGING"
            self.nat += 1
            self.next_status = (time.monotonic() + self.delay, "RUNNING")
            return 200, self.operation("start"), {}
        if r.method == "GET" and r.path == f"{BASE}/machineTypes/g2-standard-8":
            return (
                200,
                {
                    "kind": "compute#machineType",
                    "name": "g2-standard-8",
                    "guestCpus": 8,
                    "memoryMb": 32768,
                    "accelerators": [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}],
                },
                {},
            )
        if r.method == "GET" and r.path == f"/v1/{COMPUTE_SERVICE}/skus":
            if r.query.get("key") != KEY:
                return 403, {"error": {"code": 403, "message": "API key not valid"}}, {}
            if r.query.get("pageToken") == "page-2":
                return 200, {"skus": PAGE_2, "nextPageToken": ""}, {}
            return 200, {"skus": PAGE_1, "nextPageToken": "page-2"}, {}
        return 404, {"error": {"code": 404, "message": f"no route {r.method} {r.path}"}}, {}


@pytest.fixture
def compute() -> Iterator[tuple[Compute, FakeApi]]:
    state = Compute()
    api = FakeApi(state.handle)
    try:
        yield state, api
    finally:
        api.close()


def outputs(market: str = "spot", address_kind: str = "public") -> StackOutputs:
    return StackOutputs.parse(
        {
            "provider": "gcp",
            "region": "us-central1",
            "zone": ZONE,
            "node_ids": [NODE],
            "instance_type": "g2-standard-8",
            "market": market,
            "bucket_url": "gs://results/evals",
            "run_id": "r1",
            "server_port": 8000,
            "address_kind": address_kind,
        }
    )


def plane(api: FakeApi, *, key: str | None = KEY, price: float | None = 0.5, **kw: Any) -> GcpPlane:
    options = ClientOptions(api_endpoint=api.url)
    creds = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpPlane(
        outputs(**kw),
        NODE,
        PlaneOptions(configured_price=price, poll_s=0.02, providers={"gcp": {"billing_api_key": key}}),
        compute_v1.InstancesClient(client_options=options, credentials=creds),
        compute_v1.MachineTypesClient(client_options=options, credentials=creds),
        catalog_url=f"{api.url}/v1",
    )


def test_state_maps_gcp_statuses(compute: tuple[Compute, FakeApi]) -> None:
    state, api = compute
    p = plane(api)
    assert (p.state().status, p.state().raw) == ("running", "RUNNING")
    state.status = "TERMINATED"  # GCP's word for a stopped VM whose disks are kept
    assert (p.state().status, p.state().raw) == ("stopped", "TERMINATED")
    state.status = "STAGING"
    assert p.state().status == "pending"


def test_address_is_the_external_nat_ip_or_the_private_one(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    assert plane(api).address() == "34.1.2.1"
    assert plane(api, address_kind="private").address() == "10.128.0.5"


def test_stop_calls_the_api_and_waits_for_terminated(compute: tuple[Compute, FakeApi]) -> None:
    state, api = compute
    p = plane(api)
    t0 = time.monotonic()
    p.stop(timeout_s=5)
    assert time.monotonic() - t0 >= state.delay - 0.02
    assert len(api.calls("POST", "/stop")) == 1
    assert p.state().stopped


def test_start_waits_for_running_and_the_external_ip_changes(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    p = plane(api)
    p.stop(timeout_s=5)
    p.start(timeout_s=5)
    assert p.state().running
    assert p.address() == "34.1.2.2"
    assert len(api.calls("POST", "/start")) == 1


def test_start_without_capacity_raises_with_the_operations_error(compute: tuple[Compute, FakeApi]) -> None:
    state, api = compute
    p = plane(api)
    p.stop(timeout_s=5)
    state.start_error = {
        "httpErrorStatusCode": 503,
        "httpErrorMessage": "SERVICE UNAVAILABLE",
        "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no L4 in us-central1-a"}]},
    }
    with pytest.raises(
        ControlPlaneError, match=r"gcp start evals-prj/us-central1-a/gpu-1: .*SERVICE UNAVAILABLE"
    ):
        p.start(timeout_s=5)


def test_preemption_is_a_stop(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    assert plane(api).simulate_preemption(timeout_s=5) == "stop"
    assert len(api.calls("POST", "/stop")) == 1


def test_price_from_the_catalog_sums_cores_memory_and_gpus(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    price = plane(api).price_now()
    assert price.source == "api"
    assert price.per_hour == pytest.approx(EXPECTED)
    assert price.currency == "USD"
    assert price.details["skus"] == sorted(
        [
            "Spot Preemptible G2 Instance Core running in Americas",
            "Spot Preemptible G2 Instance Ram running in Americas",
            "Spot Preemptible Nvidia L4 GPU running in Americas",
        ]
    )
    pages = api.calls("GET", "/skus")
    assert [r.query.get("pageToken") for r in pages] == [None, "page-2"]
    assert all(r.query["key"] == KEY and r.query["currencyCode"] == "USD" for r in pages)


def test_price_without_an_api_key_is_the_configured_one(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    price = plane(api, key=None).price_now()
    assert (price.per_hour, price.source) == (0.5, "configured")
    assert api.calls("GET", "/skus") == []


def test_catalog_error_names_the_url_but_not_the_key(compute: tuple[Compute, FakeApi]) -> None:
    _, api = compute
    with pytest.raises(ControlPlaneError, match="HTTP 403") as info:
        plane(api, key="wrong-key").price_now()
    assert "wrong-key" not in str(info.value)


def test_catalog_without_a_ram_sku_falls_back_to_the_configured_price() -> None:
    shape = MachineShape("g2", 8, 32.0, (("nvidia-l4", 1),))
    assert catalog_price([PAGE_1[1], PAGE_2[1]], "us-central1", shape) is None


def test_gpus_attached_to_spot_vms_use_their_own_sku_format() -> None:
    shape = MachineShape("a3", 208, 1872.0, (("nvidia-h100-mega-80gb", 8),))
    skus = [
        sku(
            "Spot Preemptible A3 Instance Core running in Tokyo", 0, 10_000_000, regions=("asia-northeast1",)
        ),
        sku(
            "Spot Preemptible A3 Instance Ram running in Tokyo",
            0,
            1_000_000,
            unit="GiBy.h",
            regions=("asia-northeast1",),
        ),
        sku(
            "Nvidia H100 80GB Mega GPU attached to Spot Preemptible VMs running in Tokyo",
            2,
            500_000_000,
            regions=("asia-northeast1",),
        ),
    ]
    price = catalog_price(skus, "asia-northeast1", shape)
    assert price is not None
    assert price.per_hour == pytest.approx(208 * 0.01 + 1872 * 0.001 + 8 * 2.5)


def test_gpu_names_match_across_the_api_and_the_catalog() -> None:
    assert gpu_tokens("nvidia-tesla-t4") == gpu_tokens("Nvidia Tesla T4")
    assert gpu_tokens("nvidia-l4") == gpu_tokens("Nvidia L4")
    assert gpu_tokens("nvidia-a100-80gb") == gpu_tokens("Nvidia A100 80GB")
    assert gpu_tokens("nvidia-a100-80gb") != gpu_tokens("Nvidia Tesla A100")


def test_unit_price_reads_units_and_nanos() -> None:
    assert unit_price(sku("x", 1, 250_000_000)) == (1.25, "USD", "h")


def test_node_as_a_bare_name_needs_a_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    client = compute_v1.InstancesClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    with pytest.raises(ControlPlaneError, match="GOOGLE_CLOUD_PROJECT"):
        GcpPlane(outputs(), "gpu-1", PlaneOptions(), client)
    p = GcpPlane(outputs(), "gpu-1", PlaneOptions(providers={"gcp": {"project": "p2"}}), client)
    assert (p.project, p.zone, p.name) == ("p2", ZONE, "gpu-1")
