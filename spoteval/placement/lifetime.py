"""Allocation lifetime tau: estimate from observations, and lifetimes and waits from a trace.

Estimate (exponential lifetimes, right-censored)
------------------------------------------------
Each observed allocation contributes its uptime. An allocation the provider took back is a
preemption; one we ended ourselves (done, stop rule, measurement) or that is still running is
censored: it only says the lifetime was at least that long. With T the total uptime and r the
number of preemptions, the maximum-likelihood estimate is

    tau_hat = T / r

and, with a = 1 - confidence, the two-sided chi-square interval is

    [2T / chi2(1 - a/2, 2r + 2),  2T / chi2(a/2, 2r)]

(chi2(p, k): the p-quantile of the chi-square distribution with k degrees of freedom). With no
preemption at all (r = 0) there is no estimate, only the lower bound T / ln(1/a). Example: 3
preemptions in 12 h give tau_hat = 4 h and a 95% interval of about [1.37, 19.4] h.

Warnings: fewer than 5 preemptions (the interval is wide), and an observed coefficient of variation
(standard deviation / mean of the uncensored lifetimes) above 1: an exponential has exactly 1, so the
lifetimes are more irregular than the closed form assumes and a trace replay should be trusted over it.

Traces (tests/data/traces: the spot traces of "Can't Be Late", NSDI 2024)
-------------------------------------------------------------------------
A trace file is `{"metadata": {"gap_seconds": G}, "data": [v0, v1, ...]}`, one value per tick of G
seconds, each the number of instances up at the tick (spoteval.placement.availability: up where the
value is >= 1). A lifetime is a run of up ticks followed by a down one
(a preemption); a capacity wait is a run of down ticks followed by an up one. An up-run at the end
of the trace is a censored lifetime; a down-run at the end is a censored wait, and one at the start
is dropped (its beginning is unknown). Durations are ticks x G. This is the order-free reading:
spoteval.placement.availability replays a trace in order.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spoteval.placement.availability import read_trace_file

FEW_PREEMPTIONS = 5


def chi2_quantile(p: float, dof: float) -> float:
    """The p-quantile of the chi-square distribution with `dof` degrees of freedom."""
    from scipy.special import gammaincinv  # lazy: about 0.4 s to import

    return float(2.0 * gammaincinv(dof / 2.0, p))


def tau_interval(total_hours: float, preemptions: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided interval for tau; for r = 0 the one-sided lower bound T / ln(1/a) and infinity."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if total_hours <= 0:
        raise ValueError(f"total uptime must be > 0, got {total_hours}")
    a = 1 - confidence
    if preemptions == 0:
        return (total_hours / math.log(1 / a), math.inf)
    r = preemptions
    low = 2 * total_hours / chi2_quantile(1 - a / 2, 2 * r + 2)
    high = 2 * total_hours / chi2_quantile(a / 2, 2 * r)
    return (low, high)


@dataclass(frozen=True)
class LifetimeEstimate:
    """tau from observed allocations: the MLE (None when nothing was preempted) and its interval."""

    tau_hours: float | None
    interval_hours: tuple[float, float]
    confidence: float
    preemptions: int
    censored: int
    total_hours: float
    cv: float | None
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval_hours
        return {
            "tau_hours": self.tau_hours,
            "interval_hours": [low, high if math.isfinite(high) else None],
            "confidence": self.confidence,
            "preemptions": self.preemptions,
            "censored": self.censored,
            "total_hours": self.total_hours,
            "coefficient_of_variation": self.cv,
            "warnings": list(self.warnings),
        }


def estimate_tau(
    uptimes_hours: Sequence[float], preempted: Sequence[bool], confidence: float = 0.95
) -> LifetimeEstimate:
    """Estimate tau from allocations: their uptimes and whether each ended in a preemption."""
    if len(uptimes_hours) != len(preempted):
        raise ValueError("uptimes_hours and preempted must have the same length")
    if any(not math.isfinite(u) or u < 0 for u in uptimes_hours):
        raise ValueError("uptimes must be finite and >= 0")
    total = math.fsum(uptimes_hours)
    r = sum(1 for p in preempted if p)
    censored = len(preempted) - r
    low, high = tau_interval(total, r, confidence)
    lifetimes = [u for u, p in zip(uptimes_hours, preempted, strict=True) if p]
    cv: float | None = None
    if len(lifetimes) >= 2 and statistics.fmean(lifetimes) > 0:
        cv = statistics.stdev(lifetimes) / statistics.fmean(lifetimes)
    warnings: list[str] = []
    if r < FEW_PREEMPTIONS:
        warnings.append(
            f"only {r} preemption{'s' if r != 1 else ''} observed (fewer than {FEW_PREEMPTIONS}): "
            "the interval for tau is wide, treat tau as a rough guess"
        )
    if cv is not None and cv > 1:
        warnings.append(
            f"the lifetimes' coefficient of variation is {cv:.2f} > 1 (an exponential has 1): "
            "they are not exponential, trust the trace replay over the closed form"
        )
    return LifetimeEstimate(
        tau_hours=total / r if r else None,
        interval_hours=(low, high),
        confidence=confidence,
        preemptions=r,
        censored=censored,
        total_hours=total,
        cv=cv,
        warnings=tuple(warnings),
    )


# --- traces -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceRuns:
    """The lifetimes and capacity waits of a trace, in hours."""

    source: str
    gap_seconds: float
    ticks: int
    lifetimes_hours: tuple[float, ...]  # each ended by a preemption
    waits_hours: tuple[float, ...]  # each ended by capacity coming back
    censored_lifetime_hours: float | None  # the trace ends while running
    censored_wait_hours: float | None  # the trace ends while waiting

    def estimate(self, confidence: float = 0.95) -> LifetimeEstimate:
        """tau from this trace (the final running stretch, if any, is censored)."""
        uptimes = list(self.lifetimes_hours)
        preempted = [True] * len(uptimes)
        if self.censored_lifetime_hours is not None:
            uptimes.append(self.censored_lifetime_hours)
            preempted.append(False)
        return estimate_tau(uptimes, preempted, confidence)


def runs_of(values: Sequence[int] | np.ndarray[Any, Any]) -> list[tuple[bool, int]]:
    """Run-length encoding of `value != 0`: [(not_running, length), ...] in order."""
    down = np.asarray(values) != 0
    if down.size == 0:
        return []
    cuts = np.flatnonzero(down[1:] != down[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [down.size]])
    return [(bool(down[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def trace_runs(
    values: Sequence[int] | np.ndarray[Any, Any], gap_seconds: float, source: str = ""
) -> TraceRuns:
    """Lifetimes and waits of a sequence of down flags (0 = up, non-zero = down; `read_trace` makes
    them from a file's values)."""
    tick_hours = gap_seconds / 3600.0
    runs = runs_of(values)
    lifetimes: list[float] = []
    waits: list[float] = []
    censored_life: float | None = None
    censored_wait: float | None = None
    for i, (down, length) in enumerate(runs):
        last = i == len(runs) - 1
        hours = length * tick_hours
        if not down:
            if last:
                censored_life = hours
            else:
                lifetimes.append(hours)
        elif i == 0:
            continue  # started before the trace: its length is unknown
        elif last:
            censored_wait = hours
        else:
            waits.append(hours)
    return TraceRuns(
        source=source,
        gap_seconds=gap_seconds,
        ticks=len(values),
        lifetimes_hours=tuple(lifetimes),
        waits_hours=tuple(waits),
        censored_lifetime_hours=censored_life,
        censored_wait_hours=censored_wait,
    )


def read_trace(path: str | Path, reading: str = "count") -> TraceRuns:
    """The lifetimes and waits of a trace file (spoteval.placement.availability: its up-runs are
    lifetimes, its down-runs waits; `reading` how its values read). Errors name the file and the
    problem."""
    trace = read_trace_file(path, reading)
    return trace_runs((~trace.up()).astype(np.int64), trace.gap_seconds, source=trace.source)
