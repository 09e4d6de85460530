"""The user's grant: what spot-eval may spend and where, and the checks before anything that spends.

A grant is parsed from a mapping (a stack's `spot-eval:grant` block, a workload's `grant:` block, or
a JSON file) into a frozen `Grant`. Every key is optional; an absent limit is no limit, except that
nothing is ever started without the checks in this module being asked first.

YAML keys:
    budget: 500                 # total spend allowed for the run, in `currency`
    price_cap: 2.0              # the most per node-hour, checked against the price read before each start
    currency: USD
    regions: [us-east-1]        # allowed regions (empty or absent: any)
    instance_types: [g6.xlarge] # allowed instance / machine types (empty or absent: any)
    max_runtime_hours: 12       # a stop rule: the longest a node may run in one allocation
    idle_minutes: 15            # a stop rule: stop when nothing has been served for this long

Spending checks read the run record through the one billing model, spoteval/billing.py (re-exported
here: `spend`, `billed_intervals`, `BilledInterval`, `Spend`), so they count what the agent's budget rule
and the run report count; `Grant.budget_left`, `Grant.check_budget` and
`Grant.check_price_now` refuse with a `Refusal` naming the stop reason the record then carries
(`stop_rule:budget`, `stop_rule:price_cap`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from spoteval.billing import BilledInterval, Spend, billed_intervals, spend
from spoteval.config_reader import Reader
from spoteval.record import Event

__all__ = [
    "GRANT_KEYS",
    "BilledInterval",
    "Grant",
    "GrantError",
    "Refusal",
    "Spend",
    "above_price_cap",
    "billed_intervals",
    "spend",
]


def above_price_cap(per_hour: float, price_cap: float | None) -> bool:
    """The price-cap rule, one for every place that applies it (a start refused, a declared max price
    refused, a running node stopped): a price above the cap; no cap, nothing is above it."""
    return price_cap is not None and per_hour > price_cap


GRANT_KEYS: Final = frozenset(
    {"budget", "price_cap", "currency", "regions", "instance_types", "max_runtime_hours", "idle_minutes"}
)


class GrantError(ValueError):
    """A grant that cannot be parsed, or an action the grant does not allow. Names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class Refusal(GrantError):
    """The grant refuses an action that spends money; `stop_reason` is the record's reason for it."""

    def __init__(self, key: str, message: str, stop_reason: str) -> None:
        super().__init__(key, message)
        self.stop_reason = stop_reason


@dataclass(frozen=True)
class Grant:
    budget: float | None = None
    price_cap: float | None = None
    currency: str = "USD"
    regions: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    max_runtime_hours: float | None = None
    idle_minutes: float | None = None

    @classmethod
    def parse(cls, raw: object, where: str = "grant") -> Grant:
        if raw is None:
            return cls()
        read = Reader(raw, where, error=GrantError, known=GRANT_KEYS)
        currency = read.raw.get("currency", "USD")
        if not isinstance(currency, str) or not currency:
            read.fail("currency", f"must be a currency code, got {currency!r}")
        return cls(
            budget=read.opt_number("budget"),
            price_cap=read.opt_number("price_cap", positive=True),
            currency=currency,
            regions=read.strings("regions", what="names", single=True),
            instance_types=read.strings("instance_types", what="names", single=True),
            max_runtime_hours=read.opt_number("max_runtime_hours", positive=True),
            idle_minutes=read.opt_number("idle_minutes", positive=True),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "price_cap": self.price_cap,
            "currency": self.currency,
            "regions": list(self.regions),
            "instance_types": list(self.instance_types),
            "max_runtime_hours": self.max_runtime_hours,
            "idle_minutes": self.idle_minutes,
        }

    # --- placement checks (no money is spent by asking) ---------------------------------------

    def check_region(self, region: str, key: str = "region") -> None:
        if self.regions and region not in self.regions:
            raise GrantError(
                key, f"region {region!r} is outside the grant (allowed: {', '.join(self.regions)})"
            )

    def check_instance_type(self, instance_type: str, key: str = "instance_type") -> None:
        if self.instance_types and instance_type not in self.instance_types:
            raise GrantError(
                key,
                f"instance type {instance_type!r} is outside the grant "
                f"(allowed: {', '.join(self.instance_types)})",
            )

    def check_max_price(self, max_price: float, key: str = "max_price") -> None:
        """A declared max price (bid) must not exceed the hourly cap."""
        if above_price_cap(max_price, self.price_cap):
            raise GrantError(key, f"{max_price} per hour is above the grant's price_cap {self.price_cap}")

    # --- spending checks (read the run record; they never start anything) -------------------

    def budget_left(
        self, events: Iterable[Event], *, now: datetime | None = None, fallback_price: float | None = None
    ) -> float | None:
        """The budget minus what the record shows was spent; None when the grant sets no budget.

        Hours the record has no price for are counted at `fallback_price` (e.g. the price now);
        without one they make the budget uncheckable, which is a refusal.
        """
        if self.budget is None:
            return None
        spent = spend(events, now)
        other = [c for c in spent.currencies if c != self.currency]
        if other:
            raise Refusal(
                "budget",
                f"the record has prices in {', '.join(other)} but the grant's budget is in {self.currency}",
                "stop_rule:budget",
            )
        cost = spent.cost(fallback_price)
        if cost is None:
            raise Refusal(
                "budget",
                f"{spent.unpriced_hours:.3f} billed hours in the record have no price, so the budget "
                "cannot be checked",
                "stop_rule:budget",
            )
        return self.budget - cost

    def check_budget(
        self,
        events: Iterable[Event],
        *,
        next_hours: float,
        price_per_hour: float | None,
        now: datetime | None = None,
        key: str = "budget",
    ) -> float | None:
        """Refuse a start that could run the budget out within `next_hours`; returns the budget left."""
        left = self.budget_left(events, now=now, fallback_price=price_per_hour)
        if left is None:
            return None
        if price_per_hour is None and next_hours > 0:
            raise Refusal(
                key, "the price now is unknown, so the budget cannot be checked", "stop_rule:budget"
            )
        need = next_hours * (price_per_hour or 0.0)
        if left <= 0 or need > left:
            raise Refusal(
                key,
                f"{left:.4f} {self.currency} of the budget {self.budget:g} is left; the next start may cost "
                f"up to {need:.4f} ({next_hours:.3f} h at {price_per_hour})",
                "stop_rule:budget",
            )
        return left

    def check_price_now(self, per_hour: float | None, currency: str, key: str = "price_cap") -> None:
        """Refuse a start when the price read just before it is above the cap (or cannot be known)."""
        if self.price_cap is None:
            return
        if per_hour is None:
            raise Refusal(
                key, "the price now is unknown, so the price_cap cannot be checked", "stop_rule:price_cap"
            )
        if currency != self.currency:
            raise Refusal(
                key,
                f"the price now is in {currency} but the grant's price_cap is in {self.currency}",
                "stop_rule:price_cap",
            )
        if above_price_cap(per_hour, self.price_cap):
            raise Refusal(
                key,
                f"the price now, {per_hour:g} {currency} per hour, is above the grant's price_cap "
                f"{self.price_cap:g}",
                "stop_rule:price_cap",
            )
