"""What a stack's declarations cost: the hourly price of the nodes it declares, and the run's expected
cost from the placement, as `python -m scripts.plan` prints them beside the resources.

The price per node-hour is the stack's own (`spot-eval:workload.prices` for the node's market), or,
with `price_now`, the one the offers' price reader gives right now (spoteval/offers: the same reader
as `scripts.placement --offers`; only prices are read). When the reader cannot be reached the
stack's price is used and the reason is shown. The run's expected cost, billed hours and wall time
are the placement's closed form (spoteval.placement) for the stack's workload on the declared
market, for the declared number of nodes; the placement's own decision is shown beside it, so a
stack that declares what the placement would not choose says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.settings import Settings
from spoteval.figures import hours, money


@dataclass(frozen=True)
class PlanCost:
    """The money side of a plan (see the module docstring); None fields are not known."""

    nodes: int
    market: str
    instance_type: str
    price_per_hour: float | None
    currency: str
    price_source: str
    expected_cost: float | None = None
    billed_hours: float | None = None
    wall_hours: float | None = None
    p_deadline: float | None = None
    decision: str | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        """The plan's `cost:` section, as text."""
        out = ["cost:"]
        if self.nodes == 0:
            out.append("  nodes: none declared (node.count 0): nothing is billed by the hour but the holds")
            return out
        if self.price_per_hour is None:
            out.append(f"  price: unknown ({self.price_source})")
        else:
            fleet = self.price_per_hour * self.nodes
            each = f" ({self.nodes} x {money(self.price_per_hour)})" if self.nodes > 1 else ""
            what = f"{self.nodes} x {self.instance_type} on the {self.market} market"
            out.append(
                f"  price: {money(fleet)} {self.currency} per hour{each} for {what} ({self.price_source})"
            )
        if self.expected_cost is not None and self.billed_hours is not None and self.wall_hours is not None:
            chance = (
                f", deadline met with probability {self.p_deadline:.2f}"
                if self.p_deadline is not None
                else ""
            )
            cost = f"{money(self.expected_cost)} {self.currency}"
            out.append(
                f"  run: expected cost {cost} for {money(self.billed_hours)} billed node-hours, "
                f"{hours(self.wall_hours)} of wall time{chance} (the placement's closed form for "
                "spot-eval:workload)"
            )
        if self.decision is not None:
            agrees = "as declared" if self.decision == self.market else f"declared: {self.market}"
            out.append(f"  placement: decides {self.decision} ({agrees})")
        if self.note:
            out.append(f"  note: {self.note}")
        return out


def _price_now(settings: Settings, raw: Mapping[str, Any]) -> tuple[float | None, str, str]:
    """(price, currency, where it came from) read now through the offers' reader; (None, ..., why)."""
    from spoteval.offers.build import default_readers, stack_offers
    from spoteval.offers.instances import gpus_of
    from spoteval.offers.prices import Offer, OfferPrice, read_prices
    from spoteval.placement import PlacementError

    try:
        stack = stack_offers(settings.stack, raw)
    except PlacementError as exc:
        return None, settings.grant.currency, f"not read: {exc}"
    gpus = gpus_of(settings.provider, settings.node.instance_type, settings.node.gpu_count)
    offer = Offer(settings.provider, settings.region, settings.node.instance_type, settings.node.market, gpus)
    reading = read_prices([offer], default_readers([stack])).get(offer)
    if isinstance(reading, OfferPrice):
        return reading.per_hour, reading.currency, f"read now: {reading.api}"
    return None, settings.grant.currency, f"not read: {reading}"


def plan_cost(settings: Settings, raw: Mapping[str, Any], *, price_now: bool = False) -> PlanCost:
    """The cost of what `settings` declare (`raw`: the same `spot-eval:*` keys, for the offers' reader)."""
    from spoteval import placement

    node, workload = settings.node, settings.workload
    base = PlanCost(
        nodes=node.count,
        market=node.market,
        instance_type=node.instance_type,
        price_per_hour=None,
        currency=settings.grant.currency,
        price_source="the stack has no spot-eval:workload.prices for it",
    )
    configured = workload.prices.of(node.market) if workload is not None else None
    if configured is not None:
        base = dataclasses.replace(
            base, price_per_hour=configured, price_source=f"spot-eval:workload.prices.{node.market}"
        )
    if price_now and node.count > 0:
        per_hour, currency, source = _price_now(settings, raw)
        if per_hour is not None:
            base = dataclasses.replace(base, price_per_hour=per_hour, currency=currency, price_source=source)
        else:
            base = dataclasses.replace(base, price_source=f"{base.price_source}; price now {source}")
    if workload is None or node.count == 0:
        note = "" if workload is not None else "no spot-eval:workload block: no expected cost for the run"
        return dataclasses.replace(base, note=note)
    priced = workload
    if base.price_per_hour is not None and base.price_per_hour != configured:
        priced = dataclasses.replace(
            workload, prices=_with_price(workload.prices, node.market, base.price_per_hour)
        )
    priced = dataclasses.replace(priced, nodes=max(1, node.count))
    decided = placement.decide(priced)
    option = decided.placement.options.get(node.market)
    if option is None:
        return dataclasses.replace(base, decision=decided.placement.decision)
    return dataclasses.replace(
        base,
        expected_cost=option.expected_cost,
        billed_hours=option.billed_hours,
        wall_hours=option.wall_hours,
        p_deadline=option.p_deadline,
        decision=decided.placement.decision,
    )


def _with_price(prices: Any, market: str, value: float) -> Any:
    return dataclasses.replace(prices, **{market: value})
