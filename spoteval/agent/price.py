"""The price in force for the node, with its source (`configured`, `api` or `unknown`).

Order: the config's `price` (the stack's startup script may write it) -> the provider's price API,
where one answers a node with the standard library alone -> `unknown`.

- azure: the Retail Prices API needs no credentials (`price_api_url` overrides its address).
- aws: spot nodes read `DescribeSpotPriceHistory`, signed with the instance role's credentials
  (spoteval/agent/aws_price.py; `price_api_url` overrides the EC2 endpoint); on-demand nodes take
  the configured price.
- gcp: the Cloud Billing Catalog needs an API key; nebius an authenticated API; runpod a GraphQL
  API key; k8s and local have no price of their own: configured or unknown.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.agent.aws_price import spot_price_now
from spoteval.agent.config import AgentConfig
from spoteval.agent.notices import http

AZURE_RETAIL_PRICES: Final = "https://prices.azure.com/api/retail/prices"
_MAX_PAGES: Final = 5


@dataclass(frozen=True)
class Price:
    per_hour: float | None
    currency: str | None
    source: str  # api | configured | unknown
    details: Mapping[str, Any] = field(default_factory=dict)


def azure_retail_price(config: AgentConfig) -> Price:
    node = config.node
    if not node.region or not node.instance_type:
        return Price(None, None, "unknown", {"price_error": "node.region and node.instance_type are needed"})
    filt = (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{node.region}' "
        f"and armSkuName eq '{node.instance_type}' and priceType eq 'Consumption'"
    )
    base = config.price_api_url or AZURE_RETAIL_PRICES
    url: str | None = (
        base + "?" + urllib.parse.urlencode({"api-version": "2023-01-01-preview", "$filter": filt})
    )
    spot = node.market == "spot"
    best: tuple[float, str, str] | None = None
    for _ in range(_MAX_PAGES):
        if not url:
            break
        reply = http(url, timeout=5.0)
        if reply.status != 200:
            raise OSError(f"retail prices API answered {reply.status}")
        doc = json.loads(reply.body)
        for item in doc.get("Items") or []:
            if not isinstance(item, dict):
                continue
            meter, product = str(item.get("meterName", "")), str(item.get("productName", ""))
            if "Windows" in product or item.get("unitOfMeasure") != "1 Hour":
                continue
            if ("Spot" in meter) != spot or "Low Priority" in meter:
                continue
            value = item.get("retailPrice")
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if best is None or value < best[0]:
                best = (float(value), str(item.get("currencyCode") or "USD"), meter)
        url = doc.get("NextPageLink")
    if best is None:
        return Price(
            None, None, "unknown", {"price_error": "no matching Linux price in the retail prices API"}
        )
    return Price(best[0], best[1], "api", {"price_meter": best[2]})


def aws_spot_price(config: AgentConfig) -> Price:
    node = config.node
    if node.market != "spot":
        return Price(None, None, "unknown", {"price_error": "AWS on-demand prices are configured, not read"})
    if not node.region or not node.zone or not node.instance_type:
        return Price(
            None, None, "unknown", {"price_error": "node.region, node.zone and node.instance_type are needed"}
        )
    found = spot_price_now(
        node.region,
        node.zone,
        node.instance_type,
        metadata_url=config.metadata_url,
        endpoint=config.price_api_url,
    )
    if found is None:
        return Price(None, None, "unknown", {"price_error": "no spot price listed for this type and zone"})
    return Price(found.per_hour, "USD", "api", {"price_timestamp": found.timestamp})


PRICE_APIS: Final[Mapping[str, Callable[[AgentConfig], Price]]] = {
    "aws": aws_spot_price,
    "azure": azure_retail_price,
}


def resolve_price(config: AgentConfig) -> Price:
    if config.price is not None:
        return Price(config.price.per_hour, config.price.currency, "configured")
    api = PRICE_APIS.get(config.node.provider)
    if api is None:
        return Price(
            None, None, "unknown", {"price_error": f"no price API for {config.node.provider} on the node"}
        )
    try:
        return api(config)
    except (OSError, ValueError) as exc:
        return Price(None, None, "unknown", {"price_error": f"price API failed: {exc}"})
