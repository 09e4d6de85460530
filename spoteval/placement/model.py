"""The placement decision: spot, on-demand, or a non-preemptible box, and why.

The options are priced by the closed form of spoteval.placement.closed_form (the renewal model,
exponential lifetimes) and, under a deadline, spot's by the simulated spot policy
(spoteval.placement.simulate, spoteval.placement.policies).

The decision
------------
An option (spot, on_demand, non_preemptible) is considered when the workload gives its price. It is
eligible when it meets the deadline with probability >= `deadline_confidence` (spot: the simulated
probability; on-demand and non-preemptible: wall_hours <= deadline) and respects the grant: its price
per node-hour is <= the grant's `price_cap` (the grant caps every node-hour, whatever the market) and
its expected cost is <= the grant's `budget`. Spot is chosen when it is eligible and either the only
eligible option or its expected cost is below (1 - spot_margin) x the cheapest eligible other option;
otherwise the cheapest eligible other option is chosen. With no eligible option the decision is `none`.

Break-even: the lifetime tau, and the price ratio (the compared option's price over spot's), at which
the cost comparison flips, everything else held fixed. Spot's expected cost falls monotonically as tau
grows (tau * (exp(D/tau) - 1) and exp(B/tau) both decrease), so the crossing is unique and is found
by bisection on log(tau). Deadline eligibility is not part of the break-even: it is reported apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from spoteval.placement.closed_form import Estimate, closed_form, hours, money, spot_billed_hours
from spoteval.placement.workload import Workload

# Bisection range for the break-even lifetime, in hours (about 4 seconds to 100 million years).
_TAU_MIN: Final = 1e-3
_TAU_MAX: Final = 1e12


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionResult:
    """One option's numbers and eligibility, as in the JSON output's `options`."""

    name: str
    price: float
    billed_hours: float
    wall_hours: float
    expected_cost: float
    efficiency: float
    p_deadline: float | None
    eligible: bool
    why_not: str | None
    #: spot under a deadline: the policy its numbers are simulated with (spoteval.placement.policies)
    policy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "expected_cost": _finite(self.expected_cost),
            "billed_hours": _finite(self.billed_hours),
            "wall_hours": _finite(self.wall_hours),
            "efficiency": self.efficiency,
            "p_deadline": self.p_deadline,
            "eligible": self.eligible,
            "why_not": self.why_not,
            "policy": self.policy,
        }


@dataclass(frozen=True)
class SpotPolicy:
    """The spot policy chosen under a deadline and its simulated numbers (spoteval.placement.decision).

    With `spot` (no switch) the spot option keeps the closed form's numbers and this probability; a
    switching policy's numbers are its simulated means (the closed form has no switch)."""

    name: str
    mean_cost: float
    billed_hours: float
    wall_hours: float
    p_deadline: float | None
    on_demand_price: float | None = None  # what its on-demand node-hours cost (switching policies)


@dataclass(frozen=True)
class BreakEven:
    """Where the cost comparison flips, everything else held fixed.

    `tau_hours`: the lifetime at which spot's expected cost equals `threshold`, the most it may cost
    and still be chosen (the smaller of the budget and (1 - spot_margin) x the cheapest eligible
    other option). `price_ratio`: the ratio of `against`'s price to spot's price at which spot's
    expected cost equals (1 - spot_margin) x `against`'s. Each is None when nothing flips it.
    """

    tau_hours: float | None
    price_ratio: float | None
    against: str | None
    threshold: float | None
    note: str
    #: a pool (nodes > 1) with a deadline: the fewest nodes whose spot pool meets it (closed form)
    nodes_for_deadline: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tau_hours": self.tau_hours, "price_ratio": self.price_ratio}
        if self.nodes_for_deadline is not None:
            out["nodes_for_deadline"] = self.nodes_for_deadline
        return out


@dataclass(frozen=True)
class Placement:
    """The decision, its reasons, every option's numbers and the break-even."""

    workload: Workload
    decision: str
    reasons: tuple[str, ...]
    options: Mapping[str, OptionResult]
    break_even: BreakEven

    def to_json(self, simulated: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON document: decision, reasons, inputs, options, break_even, simulated."""
        return {
            "decision": self.decision,
            "reasons": list(self.reasons),
            "inputs": self.workload.to_json(),
            "options": {name: option.to_json() for name, option in self.options.items()},
            "break_even": self.break_even.to_json(),
            "simulated": dict(simulated) if simulated is not None else None,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


#: An option whose expected wall time passes this (over a century) is never eligible, deadline or not.
NEVER_FINISHES_HOURS: Final = 1e6


def _why_not(
    workload: Workload,
    name: str,
    estimate: Estimate,
    *,
    price: float,
    p_deadline: float | None,
    runs: int | None,
    policy: SpotPolicy | None = None,
) -> list[str]:
    left_out = workload.why_left_out(name)
    problems: list[str] = [f"left out: {left_out}"] if left_out is not None else []
    grant = workload.grant
    deadline = workload.deadline_hours
    if not math.isfinite(estimate.wall_hours) or estimate.wall_hours > NEVER_FINISHES_HOURS:
        problems.append(
            f"it would practically never finish (expected wall time {hours(estimate.wall_hours)}): "
            "the lifetime is far shorter than an episode plus a boot"
        )
    if deadline is not None:
        if name == "spot":
            if p_deadline is None:
                problems.append(
                    f"its chance of meeting the {hours(deadline)} deadline is unknown (not simulated)"
                )
            elif p_deadline < workload.deadline_confidence:
                seen = f" in {runs} simulated runs" if runs else ""
                how = f" with its best policy, {policy.name}," if policy and policy.name != "spot" else ""
                problems.append(
                    f"it meets the {hours(deadline)} deadline{how} with probability {p_deadline:.2f}{seen}, "
                    f"below the required {workload.deadline_confidence:g}"
                )
        elif estimate.wall_hours > deadline:
            problems.append(
                f"its wall time {hours(estimate.wall_hours)} is beyond the {hours(deadline)} deadline"
            )
    if grant.price_cap is not None and price > grant.price_cap:
        problems.append(
            f"its price {money(price)} per node-hour is above the grant's price_cap {money(grant.price_cap)}"
        )
    fallback = policy.on_demand_price if policy is not None else None
    if grant.price_cap is not None and fallback is not None and fallback > grant.price_cap:
        assert policy is not None
        problems.append(
            f"its policy {policy.name} goes on-demand at {money(fallback)} per node-hour, above the "
            f"grant's price_cap {money(grant.price_cap)}"
        )
    if grant.budget is not None and estimate.expected_cost > grant.budget:
        problems.append(
            f"its expected cost {money(estimate.expected_cost)} is above "
            f"the grant's budget {money(grant.budget)}"
        )
    return problems


def _spot_estimate(workload: Workload, estimate: Estimate, policy: SpotPolicy | None) -> Estimate:
    if policy is None or policy.name == "spot":
        return estimate
    billed = policy.billed_hours
    return Estimate(
        billed_hours=billed,
        wall_hours=policy.wall_hours,
        expected_cost=policy.mean_cost,
        efficiency=workload.rounds * workload.episode_hours / billed if billed > 0 else 0.0,
    )


def place(
    workload: Workload,
    spot_p_deadline: float | None = None,
    runs: int | None = None,
    policy: SpotPolicy | None = None,
) -> Placement:
    """Decide where to run `workload`.

    `spot_p_deadline` is the probability that pure spot meets the deadline (from
    `spoteval.placement.simulate`, over `runs` runs); without a deadline it is not needed. With a
    deadline and no probability, spot is not eligible (its deadline risk is unknown). `policy`, under
    a deadline, is the spot policy to price spot with (its probability replaces `spot_p_deadline`).
    """
    estimates = closed_form(workload)
    deadline = workload.deadline_hours
    options: dict[str, OptionResult] = {}
    if policy is not None:
        spot_p_deadline = policy.p_deadline
    for name, estimate in estimates.items():
        price = workload.prices.of(name)
        assert price is not None  # closed_form only returns priced options
        with_policy = policy if name == "spot" and deadline is not None else None
        if name == "spot":
            estimate = _spot_estimate(workload, estimate, with_policy)  # noqa: PLW2901
        if deadline is None:
            p_deadline = None
        elif name == "spot":
            p_deadline = spot_p_deadline
        else:
            p_deadline = 1.0 if estimate.wall_hours <= deadline else 0.0
        problems = _why_not(
            workload, name, estimate, price=price, p_deadline=p_deadline, runs=runs, policy=with_policy
        )
        options[name] = OptionResult(
            name=name,
            price=price,
            billed_hours=estimate.billed_hours,
            wall_hours=estimate.wall_hours,
            expected_cost=estimate.expected_cost,
            efficiency=estimate.efficiency,
            p_deadline=p_deadline,
            eligible=not problems,
            why_not="; ".join(problems) if problems else None,
            policy=with_policy.name if with_policy is not None else None,
        )

    decision, reasons = _decide(workload, options, runs)
    nodes = nodes_for_deadline(workload)
    if decision == "none" and nodes is not None and nodes > workload.nodes and deadline is not None:
        reasons.append(
            f"{nodes} spot nodes sharing the queue (`nodes: {nodes}` in the workload, `node.count: {nodes}` "
            f"in a stack) would meet the {hours(deadline)} deadline (closed form; see the break-even)."
        )
    return Placement(
        workload=workload,
        decision=decision,
        reasons=tuple(reasons),
        options=options,
        break_even=replace(break_even(workload, options), nodes_for_deadline=nodes),
    )


def _cheapest_other(options: Mapping[str, OptionResult]) -> OptionResult | None:
    others = [o for name, o in options.items() if name != "spot" and o.eligible]
    return min(others, key=lambda o: o.expected_cost) if others else None


def _decide(
    workload: Workload, options: Mapping[str, OptionResult], runs: int | None
) -> tuple[str, list[str]]:
    spot = options["spot"]
    other = _cheapest_other(options)
    margin = workload.spot_margin
    reasons: list[str] = []
    if spot.eligible and other is None:
        decision = "spot"
        reasons.append(
            f"spot is the only eligible option, at an expected cost of {money(spot.expected_cost)} "
            f"and {hours(spot.wall_hours)} of wall time."
        )
    elif spot.eligible and other is not None:
        limit = (1 - margin) * other.expected_cost
        below = 1 - spot.expected_cost / other.expected_cost if other.expected_cost > 0 else -math.inf
        if spot.expected_cost < limit:
            decision = "spot"
            reasons.append(
                f"spot's expected cost {money(spot.expected_cost)} is {below:.0%} below {other.name}'s "
                f"{money(other.expected_cost)}, more than the {margin:.0%} margin asks."
            )
        else:
            decision = other.name
            relation = f"only {below:.0%} below" if below > 0 else "not below"
            reasons.append(
                f"{other.name} is chosen: spot's expected cost {money(spot.expected_cost)} is {relation} "
                f"{other.name}'s {money(other.expected_cost)}, less than the {margin:.0%} margin asks."
            )
    elif other is not None:
        decision = other.name
        reasons.append(
            f"{other.name} is the cheapest eligible option, at an expected cost of "
            f"{money(other.expected_cost)} and {hours(other.wall_hours)} of wall time."
        )
    else:
        decision = "none"
        reasons.append("no option is eligible, so there is nowhere to run this workload within its limits.")

    chosen = options.get(decision)
    if chosen is not None and workload.deadline_hours is not None and chosen.p_deadline is not None:
        if decision == "spot":
            seen = f" in {runs} simulated runs" if runs else ""
            how = f" with the {chosen.policy} policy" if chosen.policy not in (None, "spot") else ""
            reasons.append(
                f"spot meets the {hours(workload.deadline_hours)} deadline{how} with probability "
                f"{chosen.p_deadline:.2f}{seen} (required: {workload.deadline_confidence:g})."
            )
        else:
            reasons.append(
                f"{decision} finishes in {hours(chosen.wall_hours)}, within the "
                f"{hours(workload.deadline_hours)} deadline."
            )
    for name, option in options.items():
        if name == decision:
            continue
        left_out = workload.why_left_out(name)
        if left_out is not None:
            reasons.append(f"{name} is left out: {left_out}.")
        elif not option.eligible:
            reasons.append(f"{name} is not eligible: {option.why_not}.")
        elif chosen is not None and name != "spot":
            reasons.append(
                f"{name} is eligible but costs {money(option.expected_cost)}, more than {decision}'s "
                f"{money(chosen.expected_cost)}."
            )
    return decision, reasons


def _bisect_log(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of a decreasing f on [low, high] (f(low) > 0 > f(high)), by bisection on log x."""
    a, b = math.log(low), math.log(high)
    for _ in range(200):
        mid = (a + b) / 2
        if f(math.exp(mid)) > 0:
            a = mid
        else:
            b = mid
        if b - a < 1e-12:
            break
    return math.exp((a + b) / 2)


def nodes_for_deadline(workload: Workload) -> int | None:
    """With a deadline: the fewest nodes k whose spot pool's expected wall time (closed form,
    wall(k) = wall(1) / k) is within it: for a pool, and for one node that misses it; None without
    a deadline, when spot is left out, or when one node (asked for one) meets it."""
    if workload.deadline_hours is None or workload.why_left_out("spot") is not None:
        return None
    one = closed_form(replace(workload, nodes=1))["spot"].wall_hours
    if not math.isfinite(one):
        return None
    needed = max(1, math.ceil(one / workload.deadline_hours - 1e-9))
    # one node that meets the deadline needs no hint; one that misses it is told how many would not
    return None if workload.nodes == 1 and needed == 1 else needed


def break_even(workload: Workload, options: Mapping[str, OptionResult]) -> BreakEven:
    """The lifetime and the price ratio at which the cost comparison flips (see `BreakEven`)."""
    spot = options["spot"]
    grant = workload.grant
    if workload.why_left_out("spot") is not None:
        return BreakEven(
            None, None, None, None, "none: spot is left out of this decision (the reason is below)."
        )
    if grant.price_cap is not None and spot.price > grant.price_cap:
        return BreakEven(None, None, None, None, "spot's price is above the price cap at any lifetime.")
    other = _cheapest_other(options)
    margin = workload.spot_margin
    limits = []
    if other is not None:
        limits.append((1 - margin) * other.expected_cost)
    if grant.budget is not None:
        limits.append(grant.budget)
    if not limits:
        return BreakEven(
            None, None, None, None, "no other option and no budget: cost never changes the decision."
        )
    threshold = min(limits)

    price_ratio: float | None = None
    if other is not None and spot.price > 0 and math.isfinite(spot.billed_hours):
        price_ratio = spot.billed_hours / ((1 - margin) * other.billed_hours)

    what = (
        f"(1 - {margin:g}) x {other.name}'s {money(other.expected_cost)}"
        if other is not None and threshold < (grant.budget if grant.budget is not None else math.inf)
        else f"the budget {money(threshold)}"
    )
    # log(spot cost) - log(threshold), decreasing in tau; at tau -> infinity spot costs price * n * D.
    if spot.price == 0:
        return BreakEven(None, price_ratio, other.name if other else None, threshold, "spot is free.")
    if threshold <= 0:
        return BreakEven(None, price_ratio, other.name if other else None, threshold, "nothing costs less.")
    log_threshold = math.log(threshold)

    def excess(tau: float) -> float:
        return math.log(spot.price) + math.log(max(spot_billed_hours(workload, tau), 1e-300)) - log_threshold

    tau = workload.lifetime_hours
    if excess(_TAU_MAX) >= 0:
        note = f"spot's expected cost stays above {what} even without preemptions."
        tau_hours = None
    elif excess(_TAU_MIN) <= 0:
        note = f"spot's expected cost stays below {what} for any lifetime above {hours(_TAU_MIN)}."
        tau_hours = None
    else:
        tau_hours = _bisect_log(excess, _TAU_MIN, _TAU_MAX)
        side = "above it: spot is cheap enough" if tau > tau_hours else "below it: spot costs too much"
        note = (
            f"spot's expected cost equals {what} at tau = {hours(tau_hours)}; "
            f"the workload's tau {hours(tau)} is {side}."
        )
    return BreakEven(tau_hours, price_ratio, other.name if other else None, threshold, note)
