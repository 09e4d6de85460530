"""The analysis of a run: statistics, tau, S_wait and S_boot, episodes, cost and efficiency (`analyse`)."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from spoteval import placement
from spoteval.events.match import Ledger, has_provider_events, reconcile
from spoteval.node_status import NodeStatus, node_status
from spoteval.placement import lifetime
from spoteval.record import (
    Attempt,
    Event,
    RunLayout,
    utc_now,
)
from spoteval.report.allocation import Allocation, Gap, _with_dispatch, allocation_of, allocations
from spoteval.report.load import CONFIDENCE, Problem, RunRecord
from spoteval.report.pool import PoolFigures, pool_figures
from spoteval.scores import TaskScores, task_scores

# --- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Summary of a sample of seconds."""

    n: int
    median: float
    p90: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat | None:
        xs = sorted(v for v in values if math.isfinite(v))
        if not xs:
            return None
        return cls(len(xs), _quantile(xs, 0.5), _quantile(xs, 0.9), statistics.fmean(xs), xs[0], xs[-1])

    def to_json(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median_s": self.median,
            "p90_s": self.p90,
            "mean_s": self.mean,
            "min_s": self.min,
            "max_s": self.max,
        }


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tau:
    """Mean allocation lifetime, exponential MLE with right-censoring."""

    seconds: float | None  # None when nothing was preempted (no point estimate)
    low_s: float
    high_s: float | None
    preemptions: int
    censored: int
    uptime_s: float
    confidence: float
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "tau_s": self.seconds,
            "interval_s": [self.low_s, self.high_s],
            "confidence": self.confidence,
            "preemptions": self.preemptions,
            "censored": self.censored,
            "uptime_s": self.uptime_s,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Episodes:
    manifest: int | None
    completed: int
    model_failures: int
    pending: int | None
    attempts: Mapping[str, int]
    interrupted_lost_s: float  # episode-seconds of interrupted attempts, within their allocation
    concurrency: int | None
    concurrency_source: str  # "configured" | "observed" | "unknown"
    durations_s: tuple[float, ...]  # every attempt that was not interrupted

    @property
    def lost_node_hours(self) -> float | None:
        """GPU node-hours the interrupted attempts used: episode time / episodes sharing the node."""
        if not self.concurrency:
            return None
        return self.interrupted_lost_s / self.concurrency / 3600.0


@dataclass(frozen=True)
class Efficiency:
    """Useful node time over billed node time, measured and as the closed form predicts it."""

    measured: float | None
    predicted: float | None
    useful_node_hours: float
    billed_node_hours: float
    episodes: int
    mean_episode_s: float | None
    tau_s: float | None
    boot_s: float | None  # mean S_boot: start -> first episode
    notice_tail_s: float  # per preemption: notice -> end of the allocation, billed, no new episodes
    wait_s: float | None
    concurrency: int | None
    note: str = ""

    @property
    def restart_overhead_s(self) -> float | None:
        """B for the closed form: billed time per restart without new work (S_boot + notice tail)."""
        return None if self.boot_s is None else self.boot_s + self.notice_tail_s


@dataclass(frozen=True)
class RunReport:
    record: RunRecord
    allocations: tuple[Allocation, ...]
    gaps: tuple[Gap, ...]
    tau: Tau | None
    wait: Stat | None
    boot: Stat | None
    boot_phases: Mapping[str, Stat]
    notice_tail: Stat | None
    measured_wait: Stat | None
    measured_boot: Stat | None
    measured_phases: Mapping[str, Stat]
    episodes: Episodes
    cost: Mapping[str, float]
    unpriced: int
    efficiency: Efficiency
    problems: tuple[Problem, ...]
    generated: datetime
    placement: Mapping[str, Any] | None = None
    placement_note: str = ""
    scores: tuple[TaskScores, ...] = ()  # harness shards' scores per task (spoteval/scores.py)
    #: preemptions as the agent and the provider saw them, when the record has the provider's events
    preemptions: Ledger | None = None
    pool: PoolFigures | None = None  # more than one node ran episodes: each node's share
    #: the stack's deadline and what its spot policy says now (spoteval.report.deadline.DeadlineView)
    deadline: Any = None
    deadline_note: str = ""

    @property
    def run_allocations(self) -> list[Allocation]:
        return [a for a in self.allocations if a.kind == "run"]


def _concurrency(events: Sequence[Event], attempts: Sequence[Attempt]) -> tuple[int | None, str]:
    for e in events:
        if e.kind == "start":
            for key in ("concurrency",):
                value = e.details.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value, "configured"
    # the most attempts one node ever ran at once
    best = 0
    by_node: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for a in attempts:
        by_node[a.node].append((a.started, 1))
        by_node[a.node].append((a.ended, -1))
    for marks in by_node.values():
        level = 0
        for _, step in sorted(marks, key=lambda m: (m[0], m[1])):
            level += step
            best = max(best, level)
    return (best, "observed") if best else (None, "unknown")


def estimate_tau(allocs: Sequence[Allocation], confidence: float = CONFIDENCE) -> Tau | None:
    """tau from allocation lifetimes, through `spoteval.placement.lifetime` (stopped and running:
    censored)."""
    if not allocs or sum(a.seconds for a in allocs) <= 0:
        return None
    est = lifetime.estimate_tau(
        [a.seconds / 3600.0 for a in allocs], [not a.censored for a in allocs], confidence
    )
    low_h, high_h = est.interval_hours
    return Tau(
        seconds=None if est.tau_hours is None else est.tau_hours * 3600.0,
        low_s=low_h * 3600.0,
        high_s=high_h * 3600.0 if math.isfinite(high_h) else None,
        preemptions=est.preemptions,
        censored=est.censored,
        uptime_s=est.total_hours * 3600.0,
        confidence=confidence,
        warnings=tuple(est.warnings),
    )


def _episodes(record: RunRecord, allocs: Sequence[Allocation]) -> tuple[Episodes, list[Problem]]:
    problems: list[Problem] = []
    outcomes = Counter(a.outcome for a in record.attempts)
    completed = sum(1 for r in record.results.values() if r.outcome == "completed")
    failures = sum(1 for r in record.results.values() if r.outcome == "model_failure")
    manifest = len(record.manifest) if record.manifest is not None else None
    pending = None
    if record.manifest is not None:
        pending = sum(1 for e in record.manifest if e.id not in record.results)
    lost = 0.0
    for a in record.attempts:
        if a.outcome != "interrupted":
            continue
        alloc = allocation_of(allocs, a.node, a.started)
        end = min(a.ended, alloc.end) if alloc else a.ended
        lost += max(0.0, (end - a.started).total_seconds())
    durations = tuple(a.seconds for a in record.attempts if a.outcome in ("completed", "model_failure"))
    completed_attempts = {a.episode_id for a in record.attempts if a.outcome == "completed"}
    for episode, r in record.results.items():
        if r.outcome == "completed" and episode not in completed_attempts and record.attempts:
            problems.append(
                Problem(
                    f"{RunLayout(record.run_id).results_prefix}{episode}.json",
                    "inconsistent",
                    "completed result without its attempt",
                )
            )
    concurrency, source = _concurrency(record.events, record.attempts)
    return (
        Episodes(
            manifest=manifest,
            completed=completed,
            model_failures=failures,
            pending=pending,
            attempts=dict(outcomes),
            interrupted_lost_s=lost,
            concurrency=concurrency,
            concurrency_source=source,
            durations_s=durations,
        ),
        problems,
    )


def predicted_efficiency(
    durations_s: Sequence[float], concurrency: int, tau_s: float, boot_s: float, wait_s: float
) -> float:
    """The closed form's spot efficiency (spoteval.placement) for measured D_i, C, tau, B and W."""
    workload = placement.Workload(
        episodes=len(durations_s),
        episode_hours=statistics.fmean(durations_s) / 3600.0,
        concurrency=concurrency,
        lifetime_hours=tau_s / 3600.0,
        wait_hours=wait_s / 3600.0,
        boot_hours=boot_s / 3600.0,
        prices=placement.Prices(spot=1.0),
        episode_samples_hours=tuple(d / 3600.0 for d in durations_s),
    )
    return placement.closed_form(workload)["spot"].efficiency


def notice_tail_per_preemption(allocs: Sequence[Allocation]) -> float:
    """Mean billed time from a notice to the end of the allocation, over every preempted allocation
    (one lost without notice counts 0: its end is its last heartbeat)."""
    taken = [a for a in allocs if not a.censored]
    if not taken:
        return 0.0
    return statistics.fmean(max(0.0, (a.end - a.notice).total_seconds()) if a.notice else 0.0 for a in taken)


def _efficiency(
    allocs: Sequence[Allocation],
    episodes: Episodes,
    tau: Tau | None,
    boot: Stat | None,
    wait: Stat | None,
) -> Efficiency:
    run = [a for a in allocs if a.kind == "run"]
    billed = sum(a.seconds for a in run) / 3600.0
    c = episodes.concurrency
    useful = sum(episodes.durations_s) / c / 3600.0 if c else 0.0
    n = len(episodes.durations_s)
    mean_d = statistics.fmean(episodes.durations_s) if n else None
    measured = useful / billed if billed > 0 and c else None
    predicted = None
    note = ""
    tau_s = tau.seconds if tau else None
    boot_s = boot.mean if boot else None
    tail_s = notice_tail_per_preemption(allocs)
    if not c or not n:
        note = "no finished attempts: nothing to compare"
    elif tau_s is None:
        note = "no preemption observed: tau has no point estimate, so no prediction"
    else:
        predicted = predicted_efficiency(
            episodes.durations_s, c, tau_s, (boot_s or 0.0) + tail_s, wait.mean if wait else 0.0
        )
    return Efficiency(
        measured=measured,
        predicted=predicted,
        useful_node_hours=useful,
        billed_node_hours=billed,
        episodes=n,
        mean_episode_s=mean_d,
        tau_s=tau_s,
        boot_s=boot_s,
        notice_tail_s=tail_s,
        wait_s=wait.mean if wait else None,
        concurrency=c,
        note=note,
    )


def analyse(
    record: RunRecord,
    *,
    now: datetime | None = None,
    confidence: float = CONFIDENCE,
) -> RunReport:
    """Everything the report states, from the parsed record."""
    now = now or utc_now()
    allocs, gaps, problems = allocations(record.events, now=now)
    allocs = _with_dispatch(allocs, record.attempts)
    run = [a for a in allocs if a.kind == "run"]
    meas = [a for a in allocs if a.kind == "measurement"]
    tau = estimate_tau(allocs, confidence)
    wait = Stat.of(g.seconds for g in gaps if g.kind == "capacity")
    boot = Stat.of(b for a in run if (b := a.boot_s) is not None)
    phases = _phase_stats(run)
    cycles = measurement_cycles(record.events)
    measured_wait = Stat.of(c["s_wait_s"] for c in cycles)
    measured_boot = Stat.of(c["s_boot_s"] for c in cycles)
    measured_phases = _phase_stats(meas)
    for name, values in _cycle_phases(cycles).items():
        stat = Stat.of(values)
        if stat is not None:
            measured_phases[f"cycle phase: {name}"] = stat
    episodes, more = _episodes(record, allocs)
    problems.extend(more)
    cost: dict[str, float] = defaultdict(float)
    unpriced = 0
    for a in allocs:
        c = a.cost
        if c is None:
            unpriced += 1
        else:
            cost[a.currency or "?"] += c
    return RunReport(
        record=record,
        allocations=tuple(allocs),
        gaps=tuple(gaps),
        tau=tau,
        wait=wait,
        boot=boot,
        boot_phases=phases,
        notice_tail=Stat.of(
            (a.end - a.notice).total_seconds() for a in allocs if a.notice and not a.censored
        ),
        measured_wait=measured_wait,
        measured_boot=measured_boot,
        measured_phases=measured_phases,
        episodes=episodes,
        cost=dict(cost),
        unpriced=unpriced,
        preemptions=reconcile(record.events)[1] if has_provider_events(record.events) else None,
        efficiency=_efficiency(allocs, episodes, tau, boot, wait),
        problems=tuple(record.problems) + tuple(problems),
        generated=now,
        scores=tuple(run_scores(record)),
        pool=_pool(record),
    )


def run_scores(record: RunRecord) -> list[TaskScores]:
    """Per-task scores of the run's harness shards (empty for a run of other episodes)."""
    results = [
        {"episode_id": r.episode_id, "outcome": r.outcome, "output": r.output}
        for r in record.results.values()
    ]
    params = {e.id: e.params for e in record.manifest or ()}
    return task_scores(results, params)


def _pool(record: RunRecord) -> PoolFigures | None:
    nodes = {a.node for a in record.attempts} | {r.node for r in record.results.values()}
    return pool_figures(record.attempts, record.results) if len(nodes) > 1 else None


#: The source name the restart measurement (spoteval/measure) writes into its events.
MEASUREMENT_SOURCE: Final = "measure_restart"


def measurement_cycles(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The restart measurement's cycles, as it records each one: a heartbeat whose details carry
    `measured` (phase -> seconds), `s_wait_s` and `s_boot_s` (see spoteval/measure)."""
    out: list[dict[str, Any]] = []
    for e in events:
        d = e.details
        if d.get("source") != MEASUREMENT_SOURCE or not isinstance(d.get("measured"), Mapping):
            continue
        wait, boot = d.get("s_wait_s"), d.get("s_boot_s")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (wait, boot)):
            continue
        phases = {
            k: float(v)
            for k, v in d["measured"].items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        out.append(
            {"node": e.node, "cycle": d.get("cycle"), "s_wait_s": wait, "s_boot_s": boot, "phases": phases}
        )
    return out


def _cycle_phases(cycles: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = defaultdict(list)
    for c in cycles:
        for name, seconds in c["phases"].items():
            samples[name].append(seconds)
    return samples


def _phase_stats(allocs: Sequence[Allocation]) -> dict[str, Stat]:
    samples: dict[str, list[float]] = defaultdict(list)
    for a in allocs:
        if a.agent_start is not None:
            samples["start -> agent start"].append((a.agent_start - a.start).total_seconds())
        if a.ready is not None:
            samples["start -> ready"].append((a.ready - a.start).total_seconds())
            if a.first_dispatch is not None:
                samples["ready -> first episode"].append(
                    max(0.0, (a.first_dispatch - a.ready).total_seconds())
                )
        for name, seconds in a.phases.items():
            samples[f"ready.{name}"].append(seconds)
    out: dict[str, Stat] = {}
    for name, values in samples.items():
        stat = Stat.of(values)
        if stat is not None:
            out[name] = stat
    return out


def node_statuses(report: RunReport) -> list[NodeStatus]:
    """What each node of the run is doing, as the operator and `scripts.operate status` see it from the
    record (the same function, `spoteval.node_status.node_status`, without the provider's state)."""
    ep = report.episodes
    run_done = ep.manifest is not None and ep.pending == 0
    nodes = list(dict.fromkeys(a.node for a in report.allocations))
    events = report.record.events
    return [node_status(n, events, run_done=run_done, now=report.generated) for n in nodes]
