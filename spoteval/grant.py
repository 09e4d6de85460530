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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

GRANT_KEYS: Final = frozenset(
    {"budget", "price_cap", "currency", "regions", "instance_types", "max_runtime_hours", "idle_minutes"}
)


class GrantError(ValueError):
    """A grant that cannot be parsed, or an action the grant does not allow. Names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def _number(raw: Mapping[str, Any], key: str, where: str, *, positive: bool = False) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GrantError(f"{where}.{key}", f"must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise GrantError(f"{where}.{key}", f"must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _names(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise GrantError(f"{where}.{key}", f"must be a list of names, got {value!r}")
    return tuple(value)


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
        if not isinstance(raw, Mapping):
            raise GrantError(where, f"must be a mapping, got {type(raw).__name__}")
        unknown = sorted(set(raw) - GRANT_KEYS)
        if unknown:
            raise GrantError(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(GRANT_KEYS))})")
        currency = raw.get("currency", "USD")
        if not isinstance(currency, str) or not currency:
            raise GrantError(f"{where}.currency", f"must be a currency code, got {currency!r}")
        return cls(
            budget=_number(raw, "budget", where),
            price_cap=_number(raw, "price_cap", where, positive=True),
            currency=currency,
            regions=_names(raw, "regions", where),
            instance_types=_names(raw, "instance_types", where),
            max_runtime_hours=_number(raw, "max_runtime_hours", where, positive=True),
            idle_minutes=_number(raw, "idle_minutes", where, positive=True),
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
        if self.price_cap is not None and max_price > self.price_cap:
            raise GrantError(key, f"{max_price} per hour is above the grant's price_cap {self.price_cap}")
