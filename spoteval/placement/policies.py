"""Deadline policies: when a spot run goes on-demand, and (Uniform Progress) when it comes back.

The rules are those of Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under
Deadlines", NSDI 2024 (https://www.usenix.org/conference/nsdi24/presentation/wu-zhanghao): the
Greedy policy of its section 3.4 and Uniform Progress of its section 5.2, as the authors' simulator
implements them (a decision at every tick; `rc_cr_threshold`, "Our policy: Uniform Progress", of
the sky_spot simulator), adapted to an evaluation's work.

Notation (hours): t the time since the run started, R = deadline - t the time to the deadline, W the
work left at on-demand speed (the rounds of C episodes still to run times their length: episodes in
flight count as not done, since a preemption or a switch loses them), C0 the whole work, cp = C0 - W
the work done, ep(t) = t C0 / deadline the work uniform progress expects by t, B the boot (the paper's
changeover delay d), G the tick (how often the rule is checked).

- `spot`: spot whenever it is up, idle otherwise, never on-demand.
- `spot_safety_net` (Greedy): as `spot`, until R - G < W + 2B; then on-demand to the end. The paper
  checks this only while the job is idle, because a checkpointed job on spot keeps its slack R - W
  constant; an evaluation's episodes in flight are lost with the node, so here the rule is checked
  whatever the node does, and leaving a spot node for on-demand loses the episodes in flight (W
  already counts them).
- `uniform_progress`: the same safety net, and
  1. idle and cp < ep(t) (work left W > R x C0 / deadline): on-demand, to catch up;
  2. spot up: spot (from idle at once, from on-demand as rule 3 allows), and stay on it until it is
     preempted;
  3. hysteresis: on on-demand, stay until cp >= ep(t + 2B) (W <= (R - 2B) x C0 / deadline) and spot
     is up; then spot, losing the episodes in flight on the on-demand node.

Every function works on numpy arrays (the tick engine, one element per run) and on plain floats
(the live rule of spoteval.placement.live, for a run in progress).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

#: spot markets' policies, in the order they are reported
POLICIES: Final = ("spot", "spot_safety_net", "uniform_progress")
#: the policies that switch to on-demand before the deadline
DEADLINE_POLICIES: Final = POLICIES[1:]
#: what a workload's `deadline_policy` may say: one of POLICIES, or let the placement choose
POLICY_CHOICES: Final = ("auto", *POLICIES)

IDLE: Final = 0
SPOT: Final = 1
ON_DEMAND: Final = 2

CITATION: Final = 'Wu et al., "Can\'t Be Late: Optimizing Spot Instance Savings under Deadlines", NSDI 2024'


def safety_net(hours_left: Any, work_left: Any, boot: float, tick: float) -> Any:
    """Greedy's rule: on-demand for good once R - G < W + 2B (not safe to wait one more tick)."""
    return hours_left - tick < work_left + 2 * boot


def behind(elapsed: Any, work_left: Any, work_total: float, deadline: float) -> Any:
    """Uniform progress: cp(t) < ep(t)."""
    return (work_total - work_left) < elapsed * work_total / deadline


def released(elapsed: Any, work_left: Any, work_total: float, deadline: float, boot: float) -> Any:
    """The hysteresis: cp(t) >= ep(t + 2B), on-demand may be left for spot."""
    return (work_total - work_left) >= (elapsed + 2 * boot) * work_total / deadline


def step(
    policy: str,
    *,
    market: Any,
    up: Any,
    forced: Any,
    elapsed: Any,
    work_left: Any,
    work_total: float,
    deadline: float | None,
    boot: float,
    tick: float,
) -> tuple[Any, Any]:
    """The market for the next tick (IDLE, SPOT, ON_DEMAND) and whether the safety net has fired.

    `market` is where the run is now (a spot node that was preempted is IDLE), `up` whether spot
    capacity is there now, `forced` whether the safety net fired before."""
    spot_or_idle = np.where(up, SPOT, IDLE)
    if policy == "spot" or deadline is None:
        return spot_or_idle, forced
    forced = forced | safety_net(deadline - elapsed, work_left, boot, tick)
    if policy == "spot_safety_net":
        return np.where(forced, ON_DEMAND, spot_or_idle), forced
    if policy != "uniform_progress":
        raise ValueError(f"unknown policy {policy!r}")
    late = behind(elapsed, work_left, work_total, deadline)
    free = released(elapsed, work_left, work_total, deadline, boot)
    idle_next = np.where(up, SPOT, np.where(late, ON_DEMAND, IDLE))
    od_next = np.where(up & free, SPOT, ON_DEMAND)
    new = np.where(market == ON_DEMAND, od_next, np.where(market == SPOT, SPOT, idle_next))
    return np.where(forced, ON_DEMAND, new), forced


def rule_text(policy: str, *, work_total: float, deadline: float, boot: float) -> str:
    """The policy's switching rule in hours of work left (W) against hours to the deadline (R)."""
    reserve = 2 * boot
    net = f"on-demand for good once R < W + {reserve:.3g} h (2B)"
    if policy == "spot":
        return "spot only: it never switches to on-demand"
    if policy == "spot_safety_net":
        return f"spot while it lasts, {net}"
    share = work_total / deadline
    return (
        f"spot whenever it is up; while it is not, on-demand once W > {share:.3g} x R (the job "
        f"fraction {work_total:.3g} h / {deadline:.3g} h), back to spot once W <= {share:.3g} x "
        f"(R - {reserve:.3g} h) and spot is up; {net}"
    )
