"""Azure offer prices from the Retail Prices API (no authentication), per region, in the asked currency.

Spot offers use the query of the control plane itself (`spoteval.clouds.azure`: `price_filter`,
`retail_items`, `spot_price`: the Linux `Spot` meter of the VM size in the region, newest effective
date). On-demand offers ask the same API for the size's `Consumption` meters and take the Linux one
that is neither `Spot` nor `Low Priority`. Retail prices are the list price in force now: kind
`current`, scope `region`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spoteval.clouds import ControlPlaneError, HttpGet, Price, http_get_json
from spoteval.clouds.azure import PRICES_API_VERSION, PRICES_URL, price_filter, retail_items, spot_price
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price


def on_demand_filter(region: str, sku: str) -> str:
    """The Retail Prices `$filter` for a VM size's pay-as-you-go meters in a region."""
    return (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{sku}' "
        "and priceType eq 'Consumption'"
    )


def on_demand_price(items: Iterable[Mapping[str, Any]], sku: str) -> Price | None:
    """The Linux pay-as-you-go hourly price among Retail Prices items (newest effective date), or None."""
    best: Mapping[str, Any] | None = None
    for item in items:
        meter = str(item.get("meterName", ""))
        if item.get("armSkuName") != sku or "Spot" in meter or "Low Priority" in meter:
            continue
        if "Windows" in str(item.get("productName", "")) or item.get("type", "Consumption") != "Consumption":
            continue
        if str(item.get("unitOfMeasure", "1 Hour")) != "1 Hour" or not isinstance(
            item.get("retailPrice"), int | float
        ):
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


class AzurePrices:
    """Retail prices of Azure offers: one query per region, VM size and market."""

    def __init__(
        self, *, currency: str = "USD", prices_url: str = PRICES_URL, http_get: HttpGet = http_get_json
    ) -> None:
        self.currency = currency
        self.prices_url = prices_url
        self.http_get = http_get

    def _url(self, query_filter: str) -> str:
        query = urllib.parse.urlencode(
            {
                "api-version": PRICES_API_VERSION,
                "currencyCode": f"'{self.currency}'",
                "$filter": query_filter,
            },
            quote_via=urllib.parse.quote,
        )
        return f"{self.prices_url}?{query}"

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        out: dict[Offer, Reading] = {}
        for offer in offers:
            sku, region = offer.instance_type, offer.region
            try:
                if offer.market == "spot":
                    price = spot_price(retail_items(self._url(price_filter(region, sku)), self.http_get), sku)
                else:
                    items = retail_items(self._url(on_demand_filter(region, sku)), self.http_get)
                    price = on_demand_price(items, sku)
            except ControlPlaneError as exc:
                raise PriceUnavailable(f"Retail Prices: {exc}") from None
            if price is None or price.per_hour is None:
                out[offer] = f"no Linux {offer.market} meter for {sku} in {region}"
                continue
            out[offer] = OfferPrice(
                api_price(price.per_hour, price.currency, source_details=price.details),
                clock(),
                kind="current",
                scope="region",
                api="prices.azure.com/api/retail/prices",
            )
        return out
