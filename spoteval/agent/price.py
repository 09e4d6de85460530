"""The price in force for the node, with its source (`configured`, `api` or `unknown`).

Order: the config's `price` (the stack's startup script may write it) -> the provider's price API,
where one answers a node with the standard library alone -> `unknown`.

- azure: the Retail Prices API needs no credentials (`price_api_url` overrides its address).
- aws: spot nodes read `DescribeSpotPriceHistory`, signed with the instance role's credentials
  (spoteval/agent/aws_price.py; `price_api_url` overrides the EC2 endpoint); on-demand nodes take
  the configured price.
- gcp: the Cloud Billing Catalog needs an API key; nebius an authenticated API; runpod an API
  key; k8s and local have no price of their own: configured or unknown.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from spoteval.agent.config import AgentConfig
from spoteval.agent.notices import http
from spoteval.apis.aws_spot import spot_price_now
from spoteval.price import AZURE_PRICES_URL, Price, retail_items, retail_price, retail_prices_url

__all__ = ["PRICE_APIS", "Price", "aws_spot_price", "azure_retail_price", "resolve_price"]

_MAX_PAGES: Final = 5
DEFAULT_CURRENCY: Final = "USD"  # of an unknown price (the record writes no currency without a price)


def _unknown(why: str) -> Price:
    return Price(None, DEFAULT_CURRENCY, "unknown", {"price_error": why})


def _get_json(url: str, timeout_s: float) -> Mapping[str, Any]:
    reply = http(url, timeout=timeout_s)
    if reply.status != 200:
        raise OSError(f"retail prices API answered {reply.status}")
    doc = json.loads(reply.body)
    if not isinstance(doc, dict):
        raise ValueError("retail prices API: the answer is not a JSON object")
    return doc


def azure_retail_price(config: AgentConfig) -> Price:
    node = config.node
    if not node.region or not node.instance_type:
        return _unknown("node.region and node.instance_type are needed")
    spot = node.market == "spot"
    url = retail_prices_url(
        config.price_api_url or AZURE_PRICES_URL, node.region, node.instance_type, spot_only=spot
    )

    def get(page: str) -> Mapping[str, Any]:
        return _get_json(page, config.price_timeout_s)

    found = retail_price(retail_items(url, get, _MAX_PAGES), spot=spot)
    if found is None:
        return _unknown("no matching Linux price in the retail prices API")
    return Price(found.per_hour, found.currency, "api", {"price_meter": found.details.get("meter")})


def aws_spot_price(config: AgentConfig) -> Price:
    node = config.node
    if node.market != "spot":
        return _unknown("AWS on-demand prices are configured, not read")
    if not node.region or not node.zone or not node.instance_type:
        return _unknown("node.region, node.zone and node.instance_type are needed")
    found = spot_price_now(
        node.region,
        node.zone,
        node.instance_type,
        metadata_url=config.metadata_url,
        endpoint=config.price_api_url,
        timeout_s=config.price_timeout_s,
    )
    if found is None:
        return _unknown("no spot price listed for this type and zone")
    return Price(found.per_hour, "USD", "api", {"price_timestamp": found.timestamp})


#: How often a running agent re-reads the price from its provider's API (seconds; `price_refresh_s`
#: in the config overrides it). A choice, not a provider fact: neither DescribeSpotPriceHistory nor
#: the Retail Prices API states how often its answer changes (checked 2026-12-01); both are free to
#: call. A configured price is never re-read.
PRICE_REFRESH_S: Final = 600.0

PRICE_APIS: Final[Mapping[str, Callable[[AgentConfig], Price]]] = {
    "aws": aws_spot_price,
    "azure": azure_retail_price,
}


def refresh_interval(config: AgentConfig) -> float | None:
    """Seconds between price reads while running, or None when the price cannot change (configured,
    or no API on the node)."""
    if config.price is not None or config.node.provider not in PRICE_APIS:
        return None
    return config.price_refresh_s or PRICE_REFRESH_S


def resolve_price(config: AgentConfig) -> Price:
    if config.price is not None:
        return Price(config.price.per_hour, config.price.currency, "configured")
    api = PRICE_APIS.get(config.node.provider)
    if api is None:
        return _unknown(f"no price API for {config.node.provider} on the node")
    try:
        return api(config)
    except (OSError, ValueError) as exc:
        return _unknown(f"price API failed: {exc}")


def reread(
    config: AgentConfig,
    interval: float,
    stopping: threading.Event,
    messages: queue.Queue[tuple[str, Any]],
    log: Callable[[str], None],
) -> None:
    """Read the price again every `interval` seconds until `stopping` (a thread): each known price is
    posted to the agent's loop as `("price", Price)`; a failed read keeps the last price."""
    while not stopping.wait(interval):
        try:
            price = resolve_price(config)
        except Exception as exc:
            log(f"price re-read failed: {exc!r}")
            continue
        if price.per_hour is not None:
            messages.put(("price", price))


@dataclass
class Ledger:
    """This incarnation's money at each price it read: the stretches before the last change are
    summed in `spent`; `since_s` is where the price in force began (in the incarnation's billed
    seconds)."""

    spent: float = 0.0
    since_s: float = 0.0

    def change(self, old: Price, billed_s: float) -> None:
        """The price changes now, `billed_s` into this incarnation: close the stretch at `old`."""
        if old.per_hour is not None:
            self.spent += old.per_hour * (billed_s - self.since_s) / 3600.0
        self.since_s = billed_s

    def cost(self, price: Price, billed_s: float) -> float:
        """Money so far, the price in force `price` for the open stretch (its per_hour is known)."""
        assert price.per_hour is not None
        return self.spent + price.per_hour * (billed_s - self.since_s) / 3600.0
