"""An hourly price and where it came from, and the Azure Retail Prices query.

`Price` is the one price record of the project: the agent reads one for its node before it starts
work (spoteval/agent/price.py), a control plane reads one before it starts a node
(spoteval/clouds/), and both write its three parts into the run record's events (`price_per_hour`,
`currency`, `price_source`).

The Azure Retail Prices API needs no credentials, so the agent on the node and the Azure control
plane ask it the same way: `retail_prices_url` builds the query, `retail_items` follows its pages,
`retail_price` picks the Linux hourly price of the VM size. Standard library only: this module ships
to the node.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.providers import AZURE
from spoteval.record import PRICE_SOURCES

#: GET a JSON object (errors are the caller's: the agent raises OSError, a control plane its own)
GetJson = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True)
class Price:
    """An hourly price and where it came from: `api` (read just now), `configured`, or `unknown`."""

    per_hour: float | None
    currency: str  # the price's, or for an unknown price the one it would be in
    source: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in PRICE_SOURCES:
            raise ValueError(
                f"unknown price source {self.source!r} (known: {', '.join(sorted(PRICE_SOURCES))})"
            )
        if (self.per_hour is None) != (self.source == "unknown"):
            must = "must be None" if self.source == "unknown" else "must not be None"
            raise ValueError(f"a price from {self.source!r} {must}")
        if self.per_hour is not None and self.per_hour < 0:
            raise ValueError(f"price {self.per_hour} per hour is negative")

    @property
    def recorded_currency(self) -> str | None:
        """The currency an event records beside the price: none without a price."""
        return None if self.per_hour is None else self.currency

    def to_json(self) -> dict[str, Any]:
        return {
            "per_hour": self.per_hour,
            "currency": self.currency,
            "source": self.source,
            "details": dict(self.details),
        }


# --- Azure Retail Prices ------------------------------------------------------------------------

assert AZURE.price is not None and AZURE.price.url is not None
#: the Retail Prices endpoint and the API version this query speaks (spoteval/providers.py)
AZURE_PRICES_URL: Final[str] = AZURE.price.url
AZURE_PRICES_API_VERSION: Final = AZURE.price.version or ""


class RetailPricesError(ValueError):
    """The Retail Prices API answered something this query cannot use."""


def retail_filter(region: str, sku: str, *, spot_only: bool = True) -> str:
    """The Retail Prices `$filter` for a VM size's consumption meters in a region (only its spot
    meters unless `spot_only` is False)."""
    text = (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{sku}' "
        "and priceType eq 'Consumption'"
    )
    return text + " and contains(meterName,'Spot')" if spot_only else text


def retail_prices_url(
    base: str, region: str, sku: str, *, spot_only: bool = True, currency: str | None = None
) -> str:
    """The first page's URL of the query for a VM size in a region."""
    params = {"api-version": AZURE_PRICES_API_VERSION}
    if currency:
        params["currencyCode"] = f"'{currency}'"
    params["$filter"] = retail_filter(region, sku, spot_only=spot_only)
    return f"{base}?{urllib.parse.urlencode(params, quote_via=urllib.parse.quote)}"


def retail_items(first_url: str, get_json: GetJson, max_pages: int = 100) -> Iterator[Mapping[str, Any]]:
    """Every item of a Retail Prices query, following `NextPageLink`."""
    url: str | None = first_url
    for _ in range(max_pages):
        if not url:
            return
        page = get_json(url)
        items = page.get("Items") or []
        if not isinstance(items, list):
            raise RetailPricesError("azure Retail Prices: `Items` is not a list")
        yield from (i for i in items if isinstance(i, Mapping))
        link = page.get("NextPageLink")
        url = link if isinstance(link, str) and link else None
    if url:
        raise RetailPricesError(f"azure Retail Prices: more than {max_pages} pages")


def retail_price(items: Iterable[Mapping[str, Any]], *, spot: bool = True) -> Price | None:
    """The Linux hourly price among the items of a query for one VM size (its filter selects the
    size): the spot meter (or, with `spot` False, the regular one; never a Low Priority meter); the
    newest effective date wins, the cheapest among equals. None when no item matches."""
    best: Mapping[str, Any] | None = None
    for item in items:
        meter, product = str(item.get("meterName", "")), str(item.get("productName", ""))
        if ("Spot" in meter) != spot or "Low Priority" in meter:
            continue
        if "Windows" in product or item.get("type", "Consumption") != "Consumption":
            continue
        if str(item.get("unitOfMeasure", "1 Hour")) != "1 Hour":
            continue
        value = item.get("retailPrice")
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if best is None or _newer_or_cheaper(item, best):
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


def _newer_or_cheaper(item: Mapping[str, Any], best: Mapping[str, Any]) -> bool:
    since, best_since = str(item.get("effectiveStartDate", "")), str(best.get("effectiveStartDate", ""))
    if since != best_since:
        return since > best_since
    return float(item["retailPrice"]) < float(best["retailPrice"])
