"""Prices per offer, read now: provider x region x instance type x market, no deployed node needed.

An `Offer` is what a grant may allow; a `PriceReader` per provider reads the price of many offers
at once (one query per region or per catalog page, not one per offer) and answers, per offer, an
`OfferPrice` or the reason it has none. `read_prices` asks every provider's reader once per market
and never lets one read's failure hide another's: a failed on-demand read leaves the spot prices
of the same provider standing, and a price API that cannot be reached gives each offer of that
provider and market the same one line naming the API and the fix (spoteval/offers/failures.py).

Each price says what it is:

- `kind`: `spot_history` (the newest entry of a spot price history: the price in force since its
  `since` time) or `current` (the price list in force now: a retail or catalog price, a minimum bid);
- `scope`: `zone` (one availability zone; `zone` names it), `region`, or `global` (one price for
  every region of the provider);
- `read_at`: when this process read it; `price.currency`: the currency the API answered in.

Reading a price never starts, stops or changes anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final, Protocol

from spoteval.clouds import Price
from spoteval.providers import REGISTRY, Lacks

MARKETS: Final = ("spot", "on_demand")
KINDS: Final = frozenset({"spot_history", "current"})
SCOPES: Final = frozenset({"zone", "region", "global"})

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True, order=True)
class Offer:
    """Where and on what a node could run: provider, region, instance type, market, and its GPUs.

    `gpus` is None when the instance type is not in `spoteval.offers.instances`.
    """

    provider: str
    region: str
    instance_type: str
    market: str
    gpus: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.market not in MARKETS:
            raise ValueError(f"unknown market {self.market!r} (known: {', '.join(MARKETS)})")

    @property
    def name(self) -> str:
        return f"{self.provider} {self.region} {self.instance_type} {self.market}"

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "region": self.region,
            "instance_type": self.instance_type,
            "market": self.market,
            "gpus": self.gpus,
        }


@dataclass(frozen=True)
class OfferPrice:
    """One offer's price per node-hour as read from the provider's API (see the module docstring)."""

    price: Price
    read_at: datetime
    kind: str
    scope: str
    api: str
    zone: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown price kind {self.kind!r} (known: {', '.join(sorted(KINDS))})")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown price scope {self.scope!r} (known: {', '.join(sorted(SCOPES))})")
        if self.price.per_hour is None or not math.isfinite(self.price.per_hour):
            raise ValueError("an offer's price needs a finite amount per hour")

    @property
    def per_hour(self) -> float:
        assert self.price.per_hour is not None  # checked in __post_init__
        return self.price.per_hour

    @property
    def currency(self) -> str:
        return self.price.currency

    @property
    def since(self) -> str | None:
        value = self.price.details.get("since")
        return str(value) if value else None

    def to_json(self) -> dict[str, Any]:
        return {
            "per_hour": self.per_hour,
            "currency": self.currency,
            "kind": self.kind,
            "scope": self.scope,
            "zone": self.zone,
            "since": self.since,
            "read_at": self.read_at.isoformat(),
            "api": self.api,
            "details": _plain(self.price.details),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class PriceUnavailable(Exception):
    """A provider's price API could not be reached or refused; the message is one line saying why."""


#: per offer: its price, or the reason it has none
Reading = OfferPrice | str


class PriceReader(Protocol):
    """Reads the prices of one provider's offers. Raises PriceUnavailable when the API cannot be
    reached at all; a single offer without a price gets its reason in the answer instead."""

    def read(self, offers: Sequence[Offer], clock: Clock) -> Mapping[Offer, Reading]: ...


#: provider key -> why it has no price API of its own, and what to do instead
NO_PRICE_API: Final[Mapping[str, str]] = {
    key: p.PRICE.why for key, p in REGISTRY.items() if isinstance(p.PRICE, Lacks)
}


def read_prices(
    offers: Sequence[Offer], readers: Mapping[str, PriceReader], clock: Clock = utc_now
) -> dict[Offer, Reading]:
    """Every offer's price or the reason it has none, asking each provider's reader once per market:
    each market's prices are read, and fail, on their own."""
    from spoteval.offers.failures import clean, explain

    groups: dict[tuple[str, str], list[Offer]] = {}
    for offer in offers:
        groups.setdefault((offer.provider, offer.market), []).append(offer)
    out: dict[Offer, Reading] = {}
    for (provider, market), group in groups.items():
        reader = readers.get(provider)
        if reader is None:
            why = NO_PRICE_API.get(provider)
            reason = why or f"no price reader for provider {provider!r}"
            out.update({offer: reason for offer in group})
            continue
        try:
            answers = reader.read(group, clock)
        except PriceUnavailable as exc:
            out.update({offer: explain(provider, market, str(exc)) for offer in group})
            continue
        for offer in group:
            answer = answers.get(offer, f"{provider} gave no price for this offer")
            unreachable = f"{provider} price API unavailable: "
            if isinstance(answer, str) and answer.startswith(unreachable):  # a reader that says so per offer
                answer = explain(provider, market, answer.removeprefix(unreachable))
            out[offer] = clean(answer) if isinstance(answer, str) else answer
    return out


def priced(readings: Mapping[Offer, Reading]) -> int:
    """How many offers have a price (0: nothing could be priced, which is its own answer)."""
    return sum(1 for r in readings.values() if isinstance(r, OfferPrice))


def api_price(per_hour: float, currency: str, *, source_details: Mapping[str, Any] | None = None) -> Price:
    """A price read from an API (`price_source` `api`), rounded to a millionth."""
    return Price(round(per_hour, 6), currency, "api", dict(source_details or {}))
