"""The spot policy's rule for a run in progress: what the operator and the run report say about the
deadline (they never flip the stack themselves: that is a `pulumi up` a person or their CI runs).

Inputs, from the run record and the stack's workload: the time since the run's first `start`, the
episodes of the manifest and those without a result, whether a node holds spot capacity now, and
the stack's market. The work left is the episodes without a result at the workload's episode length,
in rounds of C on each of the k nodes (ceil(left / (C k)) x D, as the simulation counts it); the
deadline runs from the first start. The rule is the policy's (spoteval.placement.policies), checked
every `check_hours` (the operator's interval):

- on spot, `spot_safety_net` and `uniform_progress`: switch to on-demand once R - check < W + 2B;
  `uniform_progress` also while no node holds spot capacity and W > R x C0 / deadline (behind the
  uniform pace);
- on on-demand, `uniform_progress`: back to spot once W <= (R - 2B) x C0 / deadline and the safety
  net does not hold (if spot capacity is there: the on-demand stack cannot see it); `spot_safety_net`
  stays on-demand to the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from spoteval.placement.closed_form import hours
from spoteval.placement.decision import decide
from spoteval.placement.policies import behind, released, safety_net
from spoteval.placement.workload import Workload

STAY: Final = "stay"
TO_ON_DEMAND: Final = "switch_to_on_demand"
TO_SPOT: Final = "back_to_spot"
#: the market each advice asks the stack for
MARKET_OF: Final = {TO_ON_DEMAND: "on_demand", TO_SPOT: "spot"}


@dataclass(frozen=True)
class RunNow:
    """What the record says about the run now."""

    elapsed_hours: float  # since the run's first start
    episodes: int  # in the manifest
    missing: int  # without a result
    holding_spot: bool  # a node holds spot capacity (serving) now
    market: str  # the stack's market: spot | on_demand


@dataclass(frozen=True)
class Advice:
    """The rule's answer now, with the numbers it compared."""

    policy: str
    action: str  # STAY, TO_ON_DEMAND, TO_SPOT
    market: str
    work_left_hours: float
    hours_to_deadline: float
    why: str

    @property
    def fires(self) -> bool:
        return self.action != STAY

    def text(self, command: str | None = None) -> str:
        numbers = (
            f"{hours(self.work_left_hours)} of work left, {hours(self.hours_to_deadline)} to the deadline"
        )
        if not self.fires:
            return f"deadline ({self.policy}): stay on {self.market} ({numbers}; {self.why})"
        what = "switch to on-demand now" if self.action == TO_ON_DEMAND else "back to spot now"
        run = f"; nothing switches by itself, run: {command}" if command else ""
        return f"deadline ({self.policy}): {what} ({numbers}; {self.why}){run}"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "action": self.action,
            "market": self.market,
            "work_left_hours": self.work_left_hours,
            "hours_to_deadline": self.hours_to_deadline,
            "why": self.why,
        }


def work_hours(workload: Workload, episodes: int) -> float:
    """`episodes` at on-demand speed: rounds of C on each of the k nodes, at the mean episode length."""
    return math.ceil(episodes / (workload.concurrency * workload.nodes)) * workload.episode_hours


def advise(workload: Workload, policy: str, now: RunNow, *, check_hours: float) -> Advice | None:
    """The rule's answer (see the module docstring); None without a deadline or once the run is done."""
    deadline = workload.deadline_hours
    if deadline is None or now.missing <= 0 or now.episodes <= 0:
        return None
    left = work_hours(workload, now.missing)
    total = work_hours(workload, now.episodes)
    to_deadline = deadline - now.elapsed_hours
    boot = workload.boot_hours
    share = total / deadline

    def answer(action: str, why: str) -> Advice:
        return Advice(policy, action, now.market, left, to_deadline, why)

    net = bool(safety_net(to_deadline, left, boot, check_hours))
    reserve = f"{hours(left)} + 2B {hours(2 * boot)}"
    if now.market == "on_demand":
        if policy != "uniform_progress" or net:
            return answer(STAY, "on-demand to the end")
        if bool(released(now.elapsed_hours, left, total, deadline, boot)):
            pace = f"{hours(left)} <= {share:.3g} x ({hours(to_deadline)} - 2B): ahead of the uniform pace"
            return answer(TO_SPOT, f"{pace}; if spot capacity is there")
        return answer(STAY, f"{hours(left)} > {share:.3g} x (R - 2B): not ahead of the uniform pace yet")
    if net:
        return answer(
            TO_ON_DEMAND, f"the safety net: {hours(to_deadline)} to the deadline is within {reserve}"
        )
    late = bool(behind(now.elapsed_hours, left, total, deadline))
    if policy == "uniform_progress" and not now.holding_spot and late:
        return answer(
            TO_ON_DEMAND,
            f"no spot capacity now and {hours(left)} > {share:.3g} x {hours(to_deadline)}: "
            "behind the uniform pace",
        )
    return answer(STAY, f"spot while it lasts; the safety net at R < W + 2B ({reserve})")


def flip_command(stack: str | None, market: str) -> str:
    """The command that moves the stack to `market` (spot | on_demand): see the README's "Flip between
    spot and on-demand"."""
    if stack is None:
        return f"pulumi config set --path node.market {market} && pulumi up (with the stack selected)"
    return f"pulumi config set --stack {stack} --path node.market {market} && pulumi up --stack {stack}"


def live_policy(workload: Workload) -> str | None:
    """The policy whose rule a live run watches: the workload's `deadline_policy`, or the placement's
    choice for it (spoteval.placement.choice; pure spot keeps Greedy's safety net); None without a
    deadline."""
    if workload.deadline_hours is None:
        return None
    name = workload.deadline_policy
    if name == "auto":
        choice = decide(workload).policy
        name = choice.name if choice is not None else "spot_safety_net"
    return "spot_safety_net" if name == "spot" else name
