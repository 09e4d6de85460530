"""Offer prices read now, per provider, against moto (EC2 spot price history) and the loopback fakes
of the Price List, the Cloud Billing Catalog, Azure Retail Prices, Runpod's REST API v2 and Nebius."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from spoteval.clouds.runpod import RunpodApi
from spoteval.offers.aws import AwsPrices
from spoteval.offers.azure import AzurePrices
from spoteval.offers.gcp import GcpPrices
from spoteval.offers.nebius import ON_DEMAND_REASON, NebiusPrices
from spoteval.offers.prices import Offer, OfferPrice, PriceReader, read_prices
from spoteval.offers.runpod import RunpodPrices
from tests import servers
from tests.fake_nebius import FakeNebius
from tests.fake_prices import GCP_KEY, PriceApis
from tests.fake_runpod import API_KEY, FakeRunpod

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)


def clock() -> datetime:
    return NOW


@pytest.fixture
def apis() -> Iterator[PriceApis]:
    fake = PriceApis()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def aws_env(moto_server: servers.Server, apis: PriceApis, monkeypatch: pytest.MonkeyPatch) -> PriceApis:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", apis.url)
    return apis


def priced(reading: object) -> OfferPrice:
    assert isinstance(reading, OfferPrice), reading
    return reading


def test_aws_spot_is_the_history_per_zone_and_on_demand_the_price_list(aws_env: PriceApis) -> None:
    spot = Offer("aws", "us-east-1", "g6.xlarge", "spot", 1)
    spot_2x = Offer("aws", "us-east-1", "g6.2xlarge", "spot", 1)
    demand = Offer("aws", "us-east-1", "g6.xlarge", "on_demand", 1)
    unknown = Offer("aws", "us-east-1", "g6.48xlarge", "on_demand", 8)
    got = AwsPrices(zones={"us-east-1": "us-east-1c"}).read([spot, spot_2x, demand, unknown], clock)

    s = priced(got[spot])
    # moto answers 0.00001 for every type in every zone it offers it
    assert (s.per_hour, s.currency, s.kind, s.scope, s.zone) == (
        0.00001,
        "USD",
        "spot_history",
        "zone",
        "us-east-1c",
    )
    assert s.price.details["chosen"] == "the stack's zone"
    assert sorted(s.price.details["zones"]) == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    ]
    assert s.read_at == NOW and s.api == "ec2:DescribeSpotPriceHistory"
    assert priced(got[spot_2x]).zone == "us-east-1c"

    d = priced(got[demand])
    assert (d.per_hour, d.currency, d.kind, d.scope, d.zone) == (0.8048, "USD", "current", "region", None)
    assert d.since == "2026-11-01T00:00:00Z"
    assert got[unknown] == "the Price List has no Linux on-demand rate for g6.48xlarge in us-east-1"
    sent = aws_env.api.calls("POST")
    assert len(sent) == 2
    assert {f["Field"]: f["Value"] for f in sent[0].body["Filters"]} == {
        "instanceType": "g6.xlarge",
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


def test_aws_spot_without_a_preferred_zone_takes_the_cheapest(aws_env: PriceApis) -> None:
    spot = Offer("aws", "us-east-1", "g5.xlarge", "spot", 1)
    s = priced(AwsPrices().read([spot], clock)[spot])
    # every zone has moto's one price: the first zone in name order wins the tie
    assert (s.zone, s.price.details["chosen"]) == ("us-east-1a", "the cheapest zone")


def test_gcp_catalog_prices_spot_and_on_demand_per_region(apis: PriceApis) -> None:
    spot = Offer("gcp", "us-central1", "g2-standard-8", "spot", 1)
    demand = Offer("gcp", "us-central1", "g2-standard-8", "on_demand", 1)
    elsewhere = Offer("gcp", "europe-west4", "g2-standard-8", "spot", 1)
    untabled = Offer("gcp", "us-central1", "a3-highgpu-8g", "spot", None)
    reader = GcpPrices(GCP_KEY, catalog_url=f"{apis.url}/v1")
    got = reader.read([spot, demand, elsewhere, untabled], clock)

    s, d = priced(got[spot]), priced(got[demand])
    assert s.per_hour == pytest.approx(8 * 0.008 + 32 * 0.00094 + 0.224)
    assert d.per_hour == pytest.approx(8 * 0.024988 + 32 * 0.002929 + 0.56)
    assert (s.kind, s.scope, s.currency, s.read_at) == ("current", "region", "USD", NOW)
    assert got[elsewhere] == "the Catalog has no complete spot price for g2-standard-8 in europe-west4"
    assert got[untabled] == "machine type a3-highgpu-8g is not in spoteval/offers/instances.py"
    pages = apis.api.calls("GET", "/skus")
    assert [r.query.get("pageToken") for r in pages] == [None, "1"]  # one pass for every offer
    assert {r.query["currencyCode"] for r in pages} == {"USD"}


def test_azure_retail_spot_meter_and_linux_pay_as_you_go(apis: PriceApis) -> None:
    spot = Offer("azure", "eastus", "Standard_NC4as_T4_v3", "spot", 1)
    demand = Offer("azure", "eastus", "Standard_NC4as_T4_v3", "on_demand", 1)
    missing = Offer("azure", "westeurope", "Standard_NC8as_T4_v3", "spot", 1)
    got = AzurePrices(prices_url=f"{apis.url}/api/retail/prices").read([spot, demand, missing], clock)
    s, d = priced(got[spot]), priced(got[demand])
    assert (s.per_hour, s.kind, s.scope, s.price.details["meter"]) == (
        0.1578,
        "current",
        "region",
        "NC4as T4 v3 Spot",
    )
    # neither Low Priority (0.1052) nor Windows (0.736): the Linux pay-as-you-go meter
    assert (d.per_hour, d.price.details["meter"]) == (0.526, "NC4as T4 v3")
    assert got[missing] == "no Linux spot meter for Standard_NC8as_T4_v3 in westeurope"
    # the on-demand query has four items on two pages: NextPageLink was followed
    assert len(apis.api.calls("GET", "/api/retail/prices")) == 1 + 2 + 1


def test_runpod_secure_cloud_list_price_times_the_gpus_and_no_spot_offer() -> None:
    fake = FakeRunpod()
    try:
        api = RunpodApi(API_KEY, rest_url=fake.url, timeout_s=5)
        one = Offer("runpod", "EU-RO-1", "NVIDIA A40", "on_demand", 1)
        two = Offer("runpod", "EU-RO-1", "NVIDIA L4", "on_demand", 2)
        spot = Offer("runpod", "EU-RO-1", "NVIDIA L4", "spot", 2)
        nothing = Offer("runpod", "EU-RO-1", "NVIDIA B200", "on_demand", 1)
        got = RunpodPrices(api).read([one, two, spot, nothing], clock)
    finally:
        fake.close()
    assert (priced(got[one]).per_hour, priced(got[one]).scope) == (0.4, "global")
    assert priced(got[two]).per_hour == pytest.approx(2 * 0.43)
    assert got[spot] == "Runpod offers no spot pods through its API"
    assert got[nothing] == "Runpod has no GPU type 'NVIDIA B200'"
    # one query per GPU type; the spot offer asks nothing
    assert [v["id"] for name, v in fake.calls if name == "getGpuType"] == [
        "NVIDIA A40",
        "NVIDIA L4",
        "NVIDIA B200",
    ]


def test_nebius_spot_price_per_platform_and_no_public_on_demand_price() -> None:
    fake = FakeNebius()
    try:
        fake.add_spot_price("eu-north1", "gpu-h100-sxm", "1.25")
        spot = Offer("nebius", "eu-north1", "gpu-h100-sxm/8gpu-128vcpu-1600gb", "spot", 8)
        demand = Offer("nebius", "eu-north1", "gpu-h100-sxm/1gpu-16vcpu-200gb", "on_demand", 1)
        got = NebiusPrices(fake.sdk).read([spot, demand], clock)
    finally:
        fake.close()
    s = priced(got[spot])
    assert (s.per_hour, s.kind, s.scope, s.currency) == (10.0, "current", "region", "USD")
    assert got[demand] == ON_DEMAND_REASON


def test_one_provider_down_is_reported_per_offer_and_the_others_are_read(apis: PriceApis) -> None:
    apis.down.add("azure")
    offers = [
        Offer("azure", "eastus", "Standard_NC4as_T4_v3", "spot", 1),
        Offer("azure", "eastus", "Standard_NC4as_T4_v3", "on_demand", 1),
        Offer("gcp", "us-central1", "g2-standard-8", "spot", 1),
        Offer("k8s", "us-central1", "g2-standard-8", "spot", 1),
    ]
    readers: dict[str, PriceReader] = {
        "azure": AzurePrices(prices_url=f"{apis.url}/api/retail/prices"),
        "gcp": GcpPrices(GCP_KEY, catalog_url=f"{apis.url}/v1"),
    }
    got = read_prices(offers, readers, clock)
    down = (
        f'Azure Retail Prices failed: GET {apis.url}/api/retail/prices: HTTP 503: {{"Error": "Service '
        'Unavailable"}; check the endpoint: SPOTEVAL_AZURE_PRICES_URL (unset: the public Retail Prices API)'
    )
    assert got[offers[0]] == down
    assert got[offers[1]] == got[offers[0]]
    assert priced(got[offers[2]]).per_hour == pytest.approx(0.31808)
    assert str(got[offers[3]]).startswith("a Kubernetes node pool has no price API of its own")
    # each market is read on its own: the on-demand query was sent although the spot one failed
    assert len(apis.api.calls("GET", "/api/retail/prices")) == 2


def test_gcp_without_an_api_key_is_unavailable_not_guessed() -> None:
    offer = Offer("gcp", "us-central1", "g2-standard-8", "spot", 1)
    got = read_prices([offer], {"gcp": GcpPrices(None)}, clock)
    need = "the Cloud Billing Catalog needs an API key (SPOTEVAL_GCP_BILLING_API_KEY)"
    assert got[offer] == f"GCP Cloud Billing Catalog failed: {need}"
