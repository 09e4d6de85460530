"""Rank the grant's offers by the decision's own figures: expected cost, wall time, deadline chance.

For every offer (provider x region x instance type x market) with a price read now, the workload is
restated for that offer and put through the placement's own code: the closed form
(`spoteval.placement.place`) for cost and wall time, and for spot offers the Monte-Carlo
(`spoteval.placement.decide`) for the probability of meeting the deadline, replaying the offer's
trace when it has one.
What changes per offer:

- the price per node-hour (spot offers: the spot price; on-demand offers: the on-demand price);
- C, the episodes in flight on one node: the workload's `concurrency` when it is per node, or
  `concurrency` x the offer's GPUs when it is per GPU (the workload's `concurrency_per: gpu`, or
  `concurrency_per` given here for every offer), so an 8-GPU node is
  compared with a 1-GPU node for the same work, and the price per episode says which is cheaper;
- tau, W and B: from the run record, a trace for that offer, or the workload
  (`spoteval.offers.evidence`); an offer ranked with the workload's tau is marked.

An offer is eligible when the placement finds it eligible (deadline met with the required
probability, price per node-hour within the grant's `price_cap`, expected cost within its
`budget`), its region and instance type are in the grant, its price is in the grant's currency,
and a price could be read. Eligible offers come first, by expected cost, a spot offer's weighed by
1 / (1 - spot_margin) exactly as the decision weighs spot against the other options; then by wall
time. The first eligible offer is the answer; with none, there is nowhere to run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spoteval.grant import Grant, GrantError
from spoteval.offers.evidence import Evidence, Measured, OfferKey, resolve
from spoteval.offers.instances import gpus_of
from spoteval.offers.prices import MARKETS, Offer, OfferPrice, Reading
from spoteval.placement import CONCURRENCY_PER, OptionResult, Prices, Workload, decide, place


@dataclass(frozen=True)
class Candidate:
    """An offer to rank, with the workload and grant it is ranked under and the stack it came from."""

    offer: Offer
    workload: Workload
    grant: Grant
    stack: str | None = None


def stack_candidates(
    *,
    stack: str | None,
    provider: str,
    region: str,
    instance_type: str,
    grant: Grant,
    workload: Workload,
    gpu_count: int | None = None,
    markets: Sequence[str] = MARKETS,
) -> list[Candidate]:
    """Every offer of one stack: its region and the grant's regions x its instance type and the
    grant's instance types x the markets. The stack's own region or type may lie outside the grant:
    it is then listed, not eligible, with the reason."""
    regions = list(dict.fromkeys([region, *grant.regions]))
    types = list(dict.fromkeys([instance_type, *grant.instance_types]))
    return [
        Candidate(Offer(provider, r, t, m, gpus_of(provider, t, gpu_count)), workload, grant, stack)
        for r in regions
        for t in types
        for m in markets
    ]


@dataclass(frozen=True)
class RankedOffer:
    """One offer's figures (None where there is no price) and whether it may be used."""

    candidate: Candidate
    price: OfferPrice | None
    eligible: bool
    why_not: str | None
    evidence: Evidence | None = None
    workload: Workload | None = None
    option: OptionResult | None = None
    rank: int | None = None
    warnings: tuple[str, ...] = ()

    @property
    def offer(self) -> Offer:
        return self.candidate.offer

    @property
    def cost_per_episode(self) -> float | None:
        if self.option is None or self.workload is None:
            return None
        return self.option.expected_cost / self.workload.episodes

    def to_json(self) -> dict[str, Any]:
        """One offer in the decision's JSON shape: its `inputs` (the workload as ranked for this
        offer) and the option's figures, plus the offer, its price and where tau and S came from."""
        figures: dict[str, Any] = (
            self.option.to_json()
            if self.option is not None
            else dict.fromkeys(("expected_cost", "billed_hours", "wall_hours", "efficiency", "p_deadline"))
        )
        figures.update(eligible=self.eligible, why_not=self.why_not)
        per_episode = self.cost_per_episode
        doc: dict[str, Any] = _finite_json(
            {
                "rank": self.rank,
                "offer": {**self.offer.to_json(), "stack": self.candidate.stack},
                "price": self.price.to_json() if self.price is not None else None,
                "evidence": self.evidence.to_json() if self.evidence is not None else None,
                "inputs": self.workload.to_json() if self.workload is not None else None,
                **figures,
                "cost_per_episode": per_episode,
                "warnings": list(self.warnings),
            }
        )
        return doc


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(v) for v in value]
    return value


@dataclass(frozen=True)
class Ranking:
    """Every offer, eligible ones first in rank order; `best` is the answer (None: nowhere to run)."""

    offers: tuple[RankedOffer, ...]

    @property
    def best(self) -> RankedOffer | None:
        return self.offers[0] if self.offers and self.offers[0].eligible else None

    @property
    def priced(self) -> int:
        """How many offers have a price; 0 is its own answer: nothing could be priced."""
        return sum(1 for o in self.offers if o.price is not None)

    def to_json(self) -> list[dict[str, Any]]:
        return [o.to_json() for o in self.offers]


def offer_workload(
    base: Workload,
    offer: Offer,
    price: float,
    evidence: Evidence,
    *,
    grant: Grant,
    concurrency_per: str | None = None,
) -> Workload:
    """The workload restated for one offer: its price, C for its GPUs, its tau, W and B, the grant.

    `concurrency_per` overrides the workload's own (None: the workload's)."""
    concurrency_per = concurrency_per or base.concurrency_per
    if concurrency_per not in CONCURRENCY_PER:
        raise ValueError(
            f"concurrency_per must be one of {', '.join(CONCURRENCY_PER)}, got {concurrency_per!r}"
        )
    concurrency = base.concurrency
    if concurrency_per == "gpu":
        if offer.gpus is None:
            raise ValueError(f"{offer.name}: GPU count unknown")
        concurrency *= offer.gpus
    prices = Prices(spot=price) if offer.market == "spot" else Prices(spot=price, on_demand=price)
    return dataclasses.replace(
        base,
        concurrency=concurrency,
        concurrency_per=concurrency_per,
        lifetime_hours=evidence.lifetime_hours,
        lifetime_interval_hours=evidence.lifetime_interval_hours,
        wait_hours=evidence.wait_hours,
        boot_hours=evidence.boot_hours,
        prices=prices,
        grant=grant,
    )


def _decide_spot(
    workload: Workload, trace: str | None, runs: int, seed: int
) -> tuple[OptionResult, list[str]]:
    """The spot option as the placement decides it (closed form + simulated deadline chance)."""
    decided = decide(workload, runs=runs, seed=seed, trace=trace)
    return decided.placement.options["spot"], list(decided.warnings)


def _message(err: GrantError) -> str:
    return str(err).removeprefix(f"{err.key}: ")


def _scope_problems(candidate: Candidate, reading: Reading | None, concurrency_per: str) -> list[str]:
    offer, grant = candidate.offer, candidate.grant
    problems: list[str] = []
    for check, value in (
        (grant.check_region, offer.region),
        (grant.check_instance_type, offer.instance_type),
    ):
        try:
            check(value)
        except GrantError as err:
            problems.append(_message(err))
    if reading is None:
        problems.append("no price was read")
    elif isinstance(reading, str):
        problems.append(f"no price: {reading}")
    elif reading.currency != grant.currency:
        problems.append(f"its price is in {reading.currency}, the grant's limits in {grant.currency}")
    if concurrency_per == "gpu" and offer.gpus is None:
        problems.append(
            f"its GPU count is unknown (add {offer.instance_type} to spoteval/offers/instances.py), "
            "so C per GPU cannot be applied"
        )
    return problems


def rank_offers(
    candidates: Sequence[Candidate],
    readings: Mapping[Offer, Reading],
    *,
    measured: Mapping[str, Mapping[OfferKey, Measured]] | None = None,
    concurrency_per: str | None = None,
    runs: int = 2000,
    seed: int = 1,
) -> Ranking:
    """Rank every candidate (see the module docstring). Reads nothing and starts nothing.

    `concurrency_per` ("node" or "gpu") overrides every workload's own `concurrency_per`."""
    out: list[RankedOffer] = []
    for candidate in candidates:
        offer = candidate.offer
        reading = readings.get(offer)
        price = reading if isinstance(reading, OfferPrice) else None
        per = concurrency_per or candidate.workload.concurrency_per
        problems = _scope_problems(candidate, reading, per)
        if price is None or (per == "gpu" and offer.gpus is None):
            out.append(RankedOffer(candidate, price, False, "; ".join(problems)))
            continue
        key = (offer.provider, offer.region, offer.instance_type)
        evidence = resolve(key, candidate.workload, measured or {})
        workload = offer_workload(
            candidate.workload,
            offer,
            price.per_hour,
            evidence,
            grant=candidate.grant,
            concurrency_per=per,
        )
        warnings: list[str] = []
        if offer.market == "spot":
            option, warnings = _decide_spot(workload, evidence.trace, runs, seed)
        else:
            option = place(workload).options["on_demand"]
        if option.why_not:
            problems.append(option.why_not)
        out.append(
            RankedOffer(
                candidate,
                price,
                not problems,
                "; ".join(problems) or None,
                evidence,
                workload,
                option,
                warnings=tuple(warnings),
            )
        )
    return Ranking(_ordered(out))


def weighed_cost(ranked: RankedOffer) -> float:
    """Expected cost as the decision weighs it: spot's divided by (1 - spot_margin)."""
    if ranked.option is None or ranked.workload is None:
        return math.inf
    cost = ranked.option.expected_cost
    return cost / (1 - ranked.workload.spot_margin) if ranked.offer.market == "spot" else cost


def _ordered(offers: list[RankedOffer]) -> tuple[RankedOffer, ...]:
    def key(r: RankedOffer) -> tuple[bool, bool, float, float, Offer]:
        wall = r.option.wall_hours if r.option is not None else math.inf
        return (not r.eligible, r.option is None, weighed_cost(r), wall, r.offer)

    ordered = sorted(offers, key=key)
    return tuple(dataclasses.replace(r, rank=i + 1 if r.eligible else None) for i, r in enumerate(ordered))
