"""The vendor clients of `spoteval.apis`, each against a server on loopback or the vendor's own
answer shapes: one IMDSv2 client, one JSON call, one spot price rule, one Catalog pricing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from spoteval.apis import aws_spot, gcp_billing
from spoteval.apis.http import json_object
from spoteval.apis.imds import Imds
from tests.fake_metadata import FakeAws, FakeServer, _json, _Request, _text


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    fake = FakeAws()
    yield fake
    fake.close()


def test_imds_takes_one_token_and_a_new_one_after_a_401(aws: FakeAws) -> None:
    imds = Imds(aws.url + "/", ttl_s=300)
    assert imds.get("/latest/meta-data/spot/instance-action").status == 404
    assert imds.get("/latest/meta-data/spot/instance-action").status == 404
    assert [r.method for r in aws.requests] == ["PUT", "GET", "GET"]
    aws.tokens.clear()  # the token is revoked: the next read is refused once, then a new token
    assert imds.get("/latest/meta-data/spot/instance-action").status == 404
    assert [r.method for r in aws.requests[3:]] == ["GET", "PUT", "GET"]
    assert aws.unauthorized == 1
    assert aws.requests[0].headers["x-aws-ec2-metadata-token-ttl-seconds"] == "300"


class _Catalog(FakeServer):
    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.path == "/ok":
            return _json(200, {"skus": []})
        if req.path == "/list":
            return _json(200, [1, 2])
        if req.path == "/echo":
            return _json(200, {"auth": req.headers.get("authorization"), "body": req.body.decode()})
        return _text(403, "key refused")


@pytest.fixture
def catalog() -> Iterator[_Catalog]:
    fake = _Catalog()
    yield fake
    fake.close()


class Refused(Exception):
    pass


def test_json_object_answers_the_object_or_one_line_without_the_query(catalog: _Catalog) -> None:
    assert json_object(catalog.url + "/ok?key=SECRET", Refused) == {"skus": []}
    with pytest.raises(Refused) as refused:
        json_object(catalog.url + "/nope?key=SECRET", Refused, label="GET ")
    assert str(refused.value) == f"GET {catalog.url}/nope: HTTP 403: key refused"
    with pytest.raises(Refused) as not_object:
        json_object(catalog.url + "/list", Refused)
    assert str(not_object.value) == f"{catalog.url}/list: the answer is not a JSON object"
    echoed = json_object(catalog.url + "/echo", Refused, token="t0k", body={"a": 1})
    assert echoed == {"auth": "Bearer t0k", "body": '{"a": 1}'}


_XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <spotPriceHistorySet>
    <item><instanceType>g6.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>
      <spotPrice>0.31</spotPrice><timestamp>2026-11-30T04:00:00+00:00</timestamp>
      <availabilityZone>us-east-1a</availabilityZone></item>
    <item><instanceType>g6.xlarge</instanceType>
      <productDescription>Linux/UNIX (Amazon VPC)</productDescription>
      <spotPrice>0.35</spotPrice><timestamp>2026-11-30T04:30:00+00:00</timestamp>
      <availabilityZone>us-east-1a</availabilityZone></item>
    <item><instanceType>g6.xlarge</instanceType><productDescription>Windows</productDescription>
      <spotPrice>0.90</spotPrice><timestamp>2026-11-30T04:59:00+00:00</timestamp>
      <availabilityZone>us-east-1a</availabilityZone></item>
    <item><instanceType>g6.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>
      <spotPrice>0.10</spotPrice><timestamp>2026-11-30T04:59:00+00:00</timestamp>
      <availabilityZone>us-east-1b</availabilityZone></item>
  </spotPriceHistorySet>
</DescribeSpotPriceHistoryResponse>"""


def _sdk_history() -> list[dict[str, Any]]:
    """The same history as boto3 gives it (timestamps as datetimes)."""
    return [
        {
            "InstanceType": e.instance_type,
            "ProductDescription": e.product,
            "SpotPrice": str(e.per_hour),
            "Timestamp": datetime.fromisoformat(e.timestamp).astimezone(timezone.utc),
            "AvailabilityZone": e.zone,
        }
        for e in aws_spot.from_xml(_XML)
    ]


def test_the_agent_and_the_sdk_readers_pick_the_same_spot_price() -> None:
    for zone, want in (("us-east-1a", 0.35), ("us-east-1b", 0.10)):
        from_xml = aws_spot.newest(aws_spot.from_xml(_XML), "g6.xlarge", zone)
        from_sdk = aws_spot.newest(aws_spot.from_sdk(_sdk_history()), "g6.xlarge", zone)
        assert from_xml is not None and from_sdk is not None
        assert (from_xml.per_hour, from_xml.zone, from_xml.timestamp) == (want, zone, from_sdk.timestamp)
        assert from_sdk.per_hour == want
    assert aws_spot.newest(aws_spot.from_xml(_XML), "g6.2xlarge", "us-east-1a") is None
    assert aws_spot.newest(aws_spot.from_xml(_XML), "g6.xlarge", None) == aws_spot.from_xml(_XML)[3]


def _sku(description: str, nanos: int, unit: str = "h", region: str = "us-central1") -> dict[str, Any]:
    rate = {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "0", "nanos": nanos}}
    return {
        "description": description,
        "serviceRegions": [region],
        "pricingInfo": [{"pricingExpression": {"usageUnit": unit, "tieredRates": [rate]}}],
    }


SHAPE = gcp_billing.MachineShape("g2", 4, 16.0, (("nvidia-l4", 1),))


def test_one_catalog_pricing_for_spot_and_on_demand() -> None:
    skus = [
        _sku("Spot Preemptible G2 Instance Core running in Americas", 10_000_000),
        _sku("Spot Preemptible G2 Instance Ram running in Americas", 1_000_000, unit="GiBy.h"),
        _sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas", 200_000_000),
        _sku("Spot Preemptible Nvidia T4 GPU running in Americas", 90_000_000),
        _sku("G2 Instance Core running in Americas", 30_000_000),
        _sku("G2 Instance Ram running in Americas", 3_000_000, unit="GiBy.h"),
        _sku("Nvidia L4 GPU running in Americas", 600_000_000),
        _sku("Commitment v1: G2 Cpu in Americas for 1 Year", 1),
        _sku("G2 Instance Core running in Europe", 1, region="europe-west4"),
    ]
    spot = gcp_billing.shape_price(skus, "us-central1", SHAPE, gcp_billing.SPOT)
    demand = gcp_billing.shape_price(skus, "us-central1", SHAPE, gcp_billing.ON_DEMAND)
    assert spot == gcp_billing.ShapePrice(
        0.256,
        "USD",
        (
            "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas",
            "Spot Preemptible G2 Instance Core running in Americas",
            "Spot Preemptible G2 Instance Ram running in Americas",
        ),
    )
    assert demand is not None and (demand.per_hour, len(demand.skus)) == (0.768, 3)
    assert gcp_billing.shape_price(skus, "europe-west4", SHAPE, gcp_billing.ON_DEMAND) is None


def test_the_catalog_listing_follows_the_pages_and_refuses_a_bad_one() -> None:
    pages: dict[str, dict[str, Any]] = {
        "": {"skus": [{"a": 1}], "nextPageToken": "p2"},
        "p2": {"skus": [{"b": 2}, "x"]},
    }
    asked: list[str] = []

    def get(url: str) -> dict[str, Any]:
        asked.append(url)
        token = url.split("pageToken=")[1] if "pageToken=" in url else ""
        return pages[token]

    found = list(gcp_billing.skus(get, "KEY", "EUR", Refused, catalog_url="http://catalog/v1/"))
    assert found == [{"a": 1}, {"b": 2}]
    assert asked[0] == (
        f"http://catalog/v1/{gcp_billing.COMPUTE_SERVICE}/skus?key=KEY&currencyCode=EUR&pageSize=5000"
    )
    with pytest.raises(Refused, match=r"^Catalog: `skus` is not a list$"):
        list(gcp_billing.skus(lambda url: {"skus": {"a": 1}}, "KEY", "USD", Refused))
