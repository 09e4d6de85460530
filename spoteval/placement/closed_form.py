"""The closed form of the placement model: expected billed and wall hours of each option.

The model (renewal cycle, exponential lifetimes; all times in hours)
-------------------------------------------------------------------
A node runs C episodes at a time, so N episodes of length D take n = N / C "rounds" of length D.
A spot allocation lives an exponentially distributed time with mean tau, then the provider takes it
back; every episode in flight loses its progress (episodes have no checkpoints). After a preemption
the node waits W for capacity (not billed), then boots for B (billed, and itself preemptible: boot,
image, weights, warm-up, resume) before the episodes start again from scratch.

Each round then needs an uninterrupted window of length D after the node is up, or of B + D after a
restart. Solving the renewal equation for the expected time until such a window completes, and
summing over the n rounds, gives the closed form:

    spot:             billed_hours = n * tau * exp(B/tau) * (exp(D/tau) - 1)
                      wall_hours   = n * (W + tau) * exp(B/tau) * (exp(D/tau) - 1)
    on_demand,
    non_preemptible:  billed_hours = wall_hours = B + n * D
    expected_cost = price * billed_hours,   efficiency = n * D / billed_hours

With measured episode lengths D_i (`episode_minutes_samples`), `exp(D/tau) - 1` is replaced by the
mean of `exp(D_i/tau) - 1` and D by the mean of D_i: long episodes lose more work per preemption than
the mean suggests, so the mean is never plugged into the exponential.

What the closed form leaves out: the spot formula treats the node as already up at the start (the
first boot is not counted, an error of about B billed hours), it uses the fluid round count n = N / C
(a last partial round counts as a fraction), and it assumes exponential lifetimes.
`spoteval.placement.simulate` runs the same workload with discrete episodes, the first boot and any
lifetime distribution, and gives the probability of meeting the deadline, which the closed form does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from spoteval import figures
from spoteval.placement.workload import OPTIONS, Workload

_LOG_OVERFLOW: Final = 700.0


# --- the closed form ----------------------------------------------------------------------------


def _log_expm1(x: float) -> float:
    """log(exp(x) - 1) for x > 0, without overflow for large x."""
    return x + math.log(-math.expm1(-x))


def _log_mean_loss(lengths: Sequence[float], tau: float) -> float:
    """log of mean_i (exp(D_i/tau) - 1), computed in log space."""
    logs = [_log_expm1(d / tau) for d in lengths]
    top = max(logs)
    return top + math.log(math.fsum(math.exp(v - top) for v in logs) / len(logs))


def _exp_or_inf(log_value: float) -> float:
    return math.exp(log_value) if log_value < _LOG_OVERFLOW else math.inf


@dataclass(frozen=True)
class Estimate:
    """One option's closed-form numbers."""

    billed_hours: float
    wall_hours: float
    expected_cost: float
    efficiency: float


def spot_billed_hours(workload: Workload, tau: float | None = None) -> float:
    """n * tau * exp(B/tau) * mean(exp(D_i/tau) - 1); `inf` when it overflows."""
    tau = workload.lifetime_hours if tau is None else tau
    log_billed = (
        math.log(workload.rounds)
        + math.log(tau)
        + workload.boot_hours / tau
        + _log_mean_loss(workload.episode_lengths_hours, tau)
    )
    return _exp_or_inf(log_billed)


def closed_form(workload: Workload, tau: float | None = None) -> dict[str, Estimate]:
    """Expected billed hours, wall hours, cost and efficiency of every priced option.

    `tau` overrides the workload's lifetime (used for the break-even and the plot).
    """
    tau = workload.lifetime_hours if tau is None else tau
    work = workload.rounds * workload.episode_hours
    out: dict[str, Estimate] = {}
    billed = spot_billed_hours(workload, tau)
    wall = billed * (workload.wait_hours + tau) / tau / workload.nodes  # k nodes share the rounds
    out["spot"] = Estimate(
        billed_hours=billed,
        wall_hours=wall,
        expected_cost=workload.prices.spot * billed if billed < math.inf else math.inf,
        efficiency=work / billed,
    )
    steady = workload.nodes * workload.boot_hours + work  # every node boots once
    steady_wall = workload.boot_hours + work / workload.nodes
    for name in OPTIONS[1:]:
        price = workload.prices.of(name)
        if price is not None:
            out[name] = Estimate(
                billed_hours=steady,
                wall_hours=steady_wall,
                expected_cost=price * steady,
                efficiency=work / steady,
            )
    return out


def money(value: float) -> str:
    """A cost or price for reading: three significant digits (spoteval.figures), or 'unbounded'."""
    return figures.money(value)


def hours(value: float) -> str:
    """A duration given in hours for reading, in the unit that fits it (spoteval.figures)."""
    return figures.hours(value)
