"""AWS offer prices: EC2 spot price history per availability zone, and the Price List API on demand.

- Spot: `DescribeSpotPriceHistory` for the region's offers in one paginated call (Linux/UNIX, from
  now, so each zone's newest entry is the price in force), each zone's price through
  `spoteval.clouds.aws.spot_price`. The offer's price is the preferred zone's (the stack's zone,
  when it is in that region) or else the cheapest zone's; every zone's price is kept in `details`.
  Kind `spot_history`, scope `zone`, USD.
- On-demand: the Price List Query API `GetProducts` (service `AmazonEC2`; Linux, shared tenancy, no
  pre-installed software, capacity status `Used`), served from us-east-1; the product's OnDemand
  hourly rate. Kind `current`, scope `region`, USD.

Credentials, region and endpoints come from the standard environment as boto3 reads it
(`AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL_PRICING` point either at a test server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from spoteval.apis import aws_spot
from spoteval.clouds.aws import spot_price
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price

#: the Price List Query API answers only in a few regions; us-east-1 is one
PRICING_REGION: Final = "us-east-1"
PRODUCT_FILTERS: Final = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}

Session = Callable[[str], Any]


def _session(region: str) -> Any:
    return boto3.session.Session(region_name=region)


def _error(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".strip()
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class AwsPrices:
    """Spot and on-demand prices of AWS offers. `zones` maps a region to its preferred zone."""

    def __init__(self, *, zones: Mapping[str, str] | None = None, session: Session = _session) -> None:
        self.zones = dict(zones or {})
        self.session = session

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        out: dict[Offer, Reading] = {}
        spot: dict[str, list[Offer]] = {}
        for offer in offers:
            if offer.market == "spot":
                spot.setdefault(offer.region, []).append(offer)
        for region, group in spot.items():
            out.update(self._spot(region, group, clock))
        demand = [o for o in offers if o.market == "on_demand"]
        if demand:
            out.update(self._on_demand(demand, clock))
        return out

    # --- spot ---------------------------------------------------------------------------------

    def _spot(self, region: str, offers: list[Offer], clock: Clock) -> dict[Offer, Reading]:
        types = sorted({o.instance_type for o in offers})
        try:
            ec2 = self.session(region).client("ec2")
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=types,
                ProductDescriptions=list(aws_spot.PRODUCTS),
                StartTime=clock(),
            )
            history = [entry for page in pages for entry in page.get("SpotPriceHistory", [])]
        except (ClientError, BotoCoreError) as exc:
            raise PriceUnavailable(f"DescribeSpotPriceHistory in {region}: {_error(exc)}") from None
        read_at = clock()
        out: dict[Offer, Reading] = {}
        for offer in offers:
            zones = sorted(
                {
                    str(e["AvailabilityZone"])
                    for e in history
                    if e.get("InstanceType") == offer.instance_type and e.get("AvailabilityZone")
                }
            )
            prices = {z: p for z in zones if (p := spot_price(history, offer.instance_type, z)) is not None}
            if not prices:
                out[offer] = f"no Linux spot price history for {offer.instance_type} in {region}"
                continue
            preferred = self.zones.get(region)
            zone = preferred if preferred in prices else min(prices, key=lambda z: (prices[z].per_hour, z))
            chosen = prices[zone]
            assert chosen.per_hour is not None
            why = "the stack's zone" if zone == preferred else "the cheapest zone"
            details = {
                **chosen.details,
                "chosen": why,
                "zones": {z: p.per_hour for z, p in prices.items()},
            }
            out[offer] = OfferPrice(
                api_price(chosen.per_hour, chosen.currency, source_details=details),
                read_at,
                kind="spot_history",
                scope="zone",
                api="ec2:DescribeSpotPriceHistory",
                zone=zone,
            )
        return out

    # --- on demand ----------------------------------------------------------------------------

    def _on_demand(self, offers: list[Offer], clock: Clock) -> dict[Offer, Reading]:
        try:
            pricing = self.session(PRICING_REGION).client("pricing")
        except BotoCoreError as exc:
            raise PriceUnavailable(f"Price List API: {_error(exc)}") from None
        out: dict[Offer, Reading] = {}
        for offer in offers:
            filters = [
                {"Type": "TERM_MATCH", "Field": key, "Value": value}
                for key, value in {
                    "instanceType": offer.instance_type,
                    "regionCode": offer.region,
                    **PRODUCT_FILTERS,
                }.items()
            ]
            try:
                pages = pricing.get_paginator("get_products").paginate(
                    ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
                )
                products = [p for page in pages for p in page.get("PriceList", [])]
            except (ClientError, BotoCoreError) as exc:
                raise PriceUnavailable(f"Price List API GetProducts: {_error(exc)}") from None
            out[offer] = on_demand_price(products, offer, clock())
        return out


def on_demand_price(products: Sequence[str | Mapping[str, Any]], offer: Offer, read_at: datetime) -> Reading:
    """The hourly OnDemand rate of the one product the Price List gives for an offer, or why not."""
    rates: dict[float, Mapping[str, Any]] = {}
    for raw in products:
        product = json.loads(raw) if isinstance(raw, str) else raw
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                if dimension.get("unit") != "Hrs" or usd is None:
                    continue
                value = float(usd)
                if value > 0:
                    rates[value] = {
                        "sku": product.get("product", {}).get("sku"),
                        "since": term.get("effectiveDate"),
                        "description": dimension.get("description"),
                    }
    if not rates:
        return f"the Price List has no Linux on-demand rate for {offer.instance_type} in {offer.region}"
    if len(rates) > 1:
        listed = ", ".join(f"{v:g}" for v in sorted(rates))
        return f"the Price List gives several Linux on-demand rates for {offer.instance_type}: {listed}"
    value, details = next(iter(rates.items()))
    return OfferPrice(
        api_price(value, "USD", source_details=details),
        read_at,
        kind="current",
        scope="region",
        api="pricing:GetProducts",
    )
