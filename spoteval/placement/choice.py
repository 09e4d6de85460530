"""The spot policy under a deadline: the cheapest simulated policy that meets it, and its rule in words.

Candidates are the policies of spoteval.placement.policies (`spot`, `spot_safety_net`,
`uniform_progress`; a workload's `deadline_policy` pins one). A candidate qualifies when its
simulated probability of meeting the deadline is >= `deadline_confidence` and, if it goes on-demand,
the on-demand price is within the grant's `price_cap`. The chosen policy is the qualifying one with
the lowest simulated mean cost; with none, the one with the best probability (the spot option is
then not eligible, and says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spoteval.placement.closed_form import hours, money
from spoteval.placement.model import SpotPolicy
from spoteval.placement.policies import CITATION, POLICIES, rule_text
from spoteval.placement.simulate import Simulation, StrategyResult
from spoteval.placement.workload import PlacementError, Workload


@dataclass(frozen=True)
class PolicyChoice:
    """The chosen spot policy, the candidates it was chosen from, and its switching rule."""

    name: str
    meets: bool  # it meets the deadline with the required probability (and the grant)
    pinned: bool  # the workload's `deadline_policy` named it
    candidates: Mapping[str, StrategyResult]
    rule: str

    @property
    def result(self) -> StrategyResult:
        return self.candidates[self.name]

    @property
    def live_policy(self) -> str:
        """The rule a live run watches: the chosen policy's; pure spot keeps the safety net's as a
        last resort (it costs nothing to be told)."""
        return "spot_safety_net" if self.name == "spot" else self.name

    def spot_policy(self, workload: Workload) -> SpotPolicy:
        r = self.result
        return SpotPolicy(
            name=self.name,
            mean_cost=r.mean_cost,
            billed_hours=r.mean_billed_hours,
            wall_hours=r.mean_wall_hours,
            p_deadline=r.p_deadline,
            on_demand_price=workload.prices.on_demand if self.name != "spot" else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "meets_deadline": self.meets,
            "pinned": self.pinned,
            "rule": self.rule,
            "candidates": {
                name: {
                    "mean_cost": r.mean_cost,
                    "p_deadline": r.p_deadline,
                    "spot_work_hours": r.spot_work_hours,
                    "mean_spot_hours": r.mean_spot_hours,
                    "first_switch": r.first_switch.to_json() if r.first_switch else None,
                }
                for name, r in self.candidates.items()
            },
        }


def _within_cap(workload: Workload) -> bool:
    cap, od = workload.grant.price_cap, workload.prices.on_demand
    return cap is None or od is None or od <= cap


def _qualifies(workload: Workload, name: str, result: StrategyResult) -> bool:
    p = result.p_deadline
    if p is None or p < workload.deadline_confidence:
        return False
    return name == "spot" or _within_cap(workload)


def choose_policy(workload: Workload, simulation: Simulation) -> PolicyChoice | None:
    """The spot policy for `workload` (see the module docstring); None without a deadline."""
    deadline = workload.deadline_hours
    if deadline is None:
        return None
    pinned = workload.deadline_policy != "auto"
    names = [workload.deadline_policy] if pinned else list(POLICIES)
    candidates = {n: simulation.strategies[n] for n in names if n in simulation.strategies}
    if pinned and not candidates:
        why = simulation.skipped.get(workload.deadline_policy, "not simulated")
        raise PlacementError("deadline_policy", f"{workload.deadline_policy} cannot be simulated: {why}")
    if not candidates:
        return None
    good = [n for n, r in candidates.items() if _qualifies(workload, n, r)]
    if good:
        name = min(good, key=lambda n: candidates[n].mean_cost)
    else:
        name = max(candidates, key=lambda n: (candidates[n].p_deadline or 0.0, -candidates[n].mean_cost))
    work = workload.rounds * workload.episode_hours / workload.nodes
    rule = rule_text(name, work_total=work, deadline=deadline, boot=workload.boot_hours)
    return PolicyChoice(name=name, meets=bool(good), pinned=pinned, candidates=candidates, rule=rule)


def policy_reasons(choice: PolicyChoice, workload: Workload, runs: int) -> list[str]:
    """The sentences that name the spot policy, its rule, and when it switched in the simulation."""
    deadline = workload.deadline_hours
    assert deadline is not None
    listed = "; ".join(
        f"{n} {money(r.mean_cost)}, p_deadline {r.p_deadline:.2f}, {r.spot_work_hours:.3g} h of the work on "
        f"spot{'' if n == 'spot' or _within_cap(workload) else ', on-demand above the price_cap'}"
        for n, r in choice.candidates.items()
        if r.p_deadline is not None
    )
    why = (
        "the policy the workload's deadline_policy names"
        if choice.pinned
        else f"the cheapest of the spot policies of {CITATION} that meets the {hours(deadline)} deadline "
        f"with probability >= {workload.deadline_confidence:g} within the grant"
    )
    out = [f"spot policy: {choice.name}, {why}: {listed}."]
    if choice.name == "spot":
        return out
    out.append(f"{choice.name}'s rule, in hours of work left W and hours to the deadline R: {choice.rule}.")
    first = choice.result.first_switch
    if first is None:
        out.append(f"in {runs} simulated runs it never went on-demand.")
    else:
        to_deadline = ""
        if first.to_deadline_hours is not None:
            to_deadline = f" against {hours(first.to_deadline_hours)} to the deadline"
        out.append(
            f"in {runs} simulated runs {first.runs:.0%} went on-demand, first at a median of "
            f"{hours(first.at_hours)} into the run, with {hours(first.work_left_hours)} of work "
            f"left{to_deadline}."
        )
    return out
