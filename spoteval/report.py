"""The run report: lifetimes, restart cost, episodes, cost and efficiency, read from the run record.

Everything here is computed from the record in the store (read through `spoteval.record` and
`spoteval.store`); nothing is kept elsewhere. The steps:

1. `load_run(store, run_id)` reads the manifest, events, attempts and results. Reading is lenient:
   an object that cannot be parsed, or that carries an unknown kind, reason, outcome or field, becomes
   a `Problem` in the report; nothing in the record can make the report fail.
2. `allocations(...)` turns each node's events into allocations: a `start` opens one; a `preempted`
   or `stop` event closes it, as does the node's next `start`. A `notice` (other than a rebalance
   recommendation) marks it preempted. An allocation with neither notice nor stop that was followed
   by another start, or that has been silent for longer than three heartbeat intervals, was lost
   without notice: its end is bounded by its last event (usually a heartbeat). Allocations we ended
   ourselves (`stop`) and allocations still running are censored for the lifetime estimate. A
   `preempted` event seen from outside with `details.launch_time` and no start before it is a node
   taken while booting, before its agent could write anything: an allocation from that launch.
3. `analyse(record)` adds tau (exponential MLE with censoring, from `spoteval.lifetime`), S_wait
   (preemption -> next start) and S_boot (start -> ready -> first episode dispatched, plus the
   phases the agent reports in `ready`), from the run's own restarts and from restart measurements,
   episode outcomes, the work interrupted attempts lost, cost (each allocation's logged price x its
   billed interval), and the measured efficiency next to the closed form's prediction for the
   measured D, tau, B and C.
4. `workload_from_run(report, base)` is the placement workload for the next run, from the measured
   numbers (what `scripts/placement.py --from-run` reads); the report ends with its decision.

`render(report)` prints the private report; `render(report, shared=True)` and
`report_json(report, shared=True)` carry the method and measurements without instance ids,
addresses, bucket or account names, run or node ids, or absolute prices.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlparse

from spoteval import billing, lifetime, placement
from spoteval.providers import BILLED_FROM_BOOT
from spoteval.record import (
    PRIVATE_DETAIL_KEYS,
    Attempt,
    Event,
    ManifestEntry,
    RecordError,
    RunLayout,
    format_time,
    parse_manifest,
    private_identifiers,
    utc_now,
)
from spoteval.store import Store, StoreError

DEFAULT_HEARTBEAT_S: Final = 30.0
#: An allocation silent for this many heartbeat intervals (and not stopped) was lost without notice.
LOST_AFTER_HEARTBEATS: Final = 3.0
CONFIDENCE: Final = 0.95

PROBLEM_CATEGORIES: Final = (
    "malformed",  # not JSON, not an object, no usable time
    "unknown_value",  # a kind, reason, outcome, market or price source outside the closed lists
    "unknown_field",  # a field this version does not know
    "invalid",  # a known field with a wrong type or value
    "missing",  # something the report needs is not in the record
    "inconsistent",  # objects that disagree with each other
)


class ReportError(Exception):
    """The report cannot be made: no such run, unreachable store, bad arguments. Names the problem."""


# --- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Something in the record the report could not take at face value."""

    key: str
    category: str
    message: str


@dataclass(frozen=True)
class RunRecord:
    """The parsed run record of one run. Events are sorted by time (then by object name)."""

    run_id: str
    store_url: str
    manifest: tuple[ManifestEntry, ...] | None
    events: tuple[Event, ...]
    attempts: tuple[Attempt, ...]
    results: Mapping[str, Attempt]
    problems: tuple[Problem, ...]
    objects: int = 0


def _categorise(message: str) -> str:
    if message.startswith(("unknown event kind", "unknown reason", "unknown market", "unknown price_source")):
        return "unknown_value"
    if message.startswith(("unknown attempt outcome", "unknown result outcome")):
        return "unknown_value"
    return "invalid"


def parse_record(
    run_id: str, objects: Mapping[str, bytes], store_url: str = "", manifest: bytes | None = None
) -> RunRecord:
    """Parse the objects of one run (keys relative to the store root). Never raises on content."""
    layout = RunLayout(run_id)
    problems: list[Problem] = []
    manifest_entries: tuple[ManifestEntry, ...] | None = None
    if manifest is None:
        problems.append(Problem(layout.manifest, "missing", "no manifest: pending episodes are unknown"))
    else:
        try:
            manifest_entries = tuple(parse_manifest(manifest.decode("utf-8", errors="replace")))
        except RecordError as exc:
            problems.append(Problem(layout.manifest, "malformed", str(exc)))

    events: list[tuple[datetime, str, Event]] = []
    attempts: list[Attempt] = []
    results: dict[str, Attempt] = {}
    for key in sorted(objects):
        data = objects[key]
        if key.startswith(layout.events_prefix):
            try:
                event, found = Event.loads(data)
            except RecordError as exc:
                problems.append(Problem(key, "malformed", str(exc)))
                continue
            problems.extend(Problem(key, _categorise(m), m) for m in found)
            if event.extra:
                names = ", ".join(sorted(event.extra))
                problems.append(Problem(key, "unknown_field", f"unknown event fields: {names}"))
            if event.run_id != run_id:
                problems.append(Problem(key, "inconsistent", "event names another run"))
            if not event.node:
                problems.append(Problem(key, "invalid", "event has no node; left out"))
                continue
            events.append((event.time, key, event))
        elif key.startswith(layout.attempts_prefix):
            where = layout.attempt_of_key(key)
            try:
                attempt, found = Attempt.loads(data)
            except RecordError as exc:
                problems.append(Problem(key, "malformed", str(exc)))
                continue
            problems.extend(Problem(key, _categorise(m), m) for m in found)
            if attempt.extra:
                names = ", ".join(sorted(attempt.extra))
                problems.append(Problem(key, "unknown_field", f"unknown attempt fields: {names}"))
            if where is None:
                problems.append(Problem(key, "inconsistent", "attempt object outside the layout"))
            elif where != (attempt.episode_id, attempt.attempt):
                problems.append(
                    Problem(key, "inconsistent", "attempt's episode or number differs from its key")
                )
            attempts.append(attempt)
        elif key.startswith(layout.results_prefix):
            episode = layout.episode_of_result(key)
            try:
                result, found = Attempt.loads(data, as_result=True)
            except RecordError as exc:
                problems.append(Problem(key, "malformed", str(exc)))
                continue
            problems.extend(Problem(key, _categorise(m), m) for m in found)
            if result.extra:
                names = ", ".join(sorted(result.extra))
                problems.append(Problem(key, "unknown_field", f"unknown result fields: {names}"))
            if episode is None or episode != result.episode_id:
                problems.append(Problem(key, "inconsistent", "result's episode differs from its key"))
            results[episode or result.episode_id] = result
    if manifest_entries is not None:
        ids = {e.id for e in manifest_entries}
        for episode in sorted(set(results) - ids):
            problems.append(
                Problem(
                    f"{layout.results_prefix}{episode}.json",
                    "inconsistent",
                    "result for an episode not in the manifest",
                )
            )
    events.sort(key=lambda t: (t[0], t[1]))
    return RunRecord(
        run_id=run_id,
        store_url=store_url,
        manifest=manifest_entries,
        events=tuple(e for _, _, e in events),
        attempts=tuple(attempts),
        results=results,
        problems=tuple(problems),
        objects=len(objects) + (manifest is not None),
    )


def load_run(store: Store, run_id: str, *, workers: int = 16) -> RunRecord:
    """Read one run's record from the store. Raises ReportError when the run is not there."""
    try:
        layout = RunLayout(run_id)
    except RecordError as exc:
        raise ReportError(f"--run {run_id!r}: {exc}") from None
    try:
        keys = [
            k
            for prefix in (layout.events_prefix, layout.attempts_prefix, layout.results_prefix)
            for k in store.list(prefix)
        ]
        manifest = store.get(layout.manifest)
        if not keys and manifest is None:
            raise ReportError(f"no run {run_id!r} in {store.url} (nothing under {layout.prefix})")
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            blobs = list(pool.map(store.get, keys))
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    objects = {k: b for k, b in zip(keys, blobs, strict=True) if b is not None}
    return parse_record(run_id, objects, store.url, manifest)


# --- allocations --------------------------------------------------------------------------------

#: How an allocation ended.
ENDINGS: Final = ("preempted", "notice", "lost", "stop", "running")
UNCENSORED: Final = frozenset({"preempted", "notice", "lost"})


@dataclass(frozen=True)
class Allocation:
    """One stretch of a node holding capacity: from a start to the end the record shows."""

    node: str
    index: int
    start: datetime
    end: datetime
    ended_by: str
    end_reason: str | None
    start_reason: str | None
    kind: str  # "run" or "measurement"
    provider: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None
    currency: str | None = None
    price_source: str = "unknown"
    prices: tuple[tuple[datetime, float], ...] = ()
    notice: datetime | None = None
    ready: datetime | None = None
    agent_start: datetime | None = None
    first_dispatch: datetime | None = None
    phases: Mapping[str, float] = field(default_factory=dict)
    last_seen: datetime | None = None
    identifiers: frozenset[str] = frozenset()

    @property
    def censored(self) -> bool:
        return self.ended_by not in UNCENSORED

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def price(self) -> float | None:
        """The price in force at the start (the first one logged)."""
        return self.prices[0][1] if self.prices else None

    def price_at(self, t: datetime) -> float | None:
        """The price in force at time `t` (the last one logged at or before it)."""
        price = None
        for when, p in self.prices:
            if when <= t or price is None:
                price = p
        return price

    @property
    def cost(self) -> float | None:
        """Price x billed interval, following every price change the record logged."""
        return billing.priced_cost(self.start, self.end, self.prices)

    @property
    def boot_s(self) -> float | None:
        """B: from the start to the first episode dispatched (or to ready when nothing ran)."""
        end = self.first_dispatch or self.ready
        return None if end is None else max(0.0, (end - self.start).total_seconds())


@dataclass(frozen=True)
class Gap:
    """A node without capacity between two allocations."""

    node: str
    begin: datetime
    end: datetime
    after: str  # how the previous allocation ended
    kind: str  # "capacity" (after a preemption or loss), "measurement", "stopped"

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.begin).total_seconds())


def heartbeat_interval(events: Sequence[Event]) -> float:
    """The heartbeat interval: from the agent's start details when logged, else the median gap."""
    for e in events:
        if e.kind == "start":
            value = e.details.get("heartbeat_s")
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return float(value)
    gaps: list[float] = []
    last: dict[str, datetime] = {}
    for e in events:
        if e.kind == "heartbeat":
            if e.node in last:
                gaps.append((e.time - last[e.node]).total_seconds())
            last[e.node] = e.time
    gaps = [g for g in gaps if g > 0]
    return statistics.median(gaps) if gaps else DEFAULT_HEARTBEAT_S


def _numeric_phases(details: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in details.items():
        if isinstance(value, bool) or key in PRIVATE_DETAIL_KEYS:
            continue
        if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
            out[key] = float(value)
        elif isinstance(value, Mapping):
            for k, v in _numeric_phases(value).items():
                out[f"{key}.{k}"] = v
    return out


def _allocation(stretch: billing.Stretch, index: int, now: datetime, beat: float) -> Allocation:
    """The report's view of one billed stretch: how it ended, what its events said."""
    opener = stretch.opener
    first: dict[str, str | None] = {}
    for attr in ("region", "zone", "instance_type", "market"):
        first[attr] = next((getattr(e, attr) for e in stretch.events if getattr(e, attr) is not None), None)
    price_source = opener.price_source
    last_price: float | None = None
    ready: datetime | None = opener.time if opener.kind == "ready" else None
    phases: dict[str, float] = {}
    identifiers: set[str] = set()
    for e in stretch.events:
        identifiers |= private_identifiers(e)
        if e.price_per_hour is not None and e.price_per_hour != last_price:
            last_price = e.price_per_hour
            if price_source == "unknown":
                price_source = e.price_source
        if e is not opener and e.kind == "ready" and ready is None:
            ready, phases = e.time, _numeric_phases(e.details)
    notice = stretch.notice
    closer = stretch.closer
    end_reason = closer.reason if closer is not None else None
    if stretch.closed_by == "preempted":
        ended_by = "preempted"
    elif stretch.closed_by == "simulated_preemption":
        # a preemption we forced (restart measurement): we ended it, so it is censored
        ended_by, end_reason = "stop", "simulated_preemption"
    elif stretch.closed_by == "stop":
        # A stop after a provider's own notice ends a preemption. A SIGTERM is also what our own
        # stops look like from inside (the OS shutdown of a measured or user stop): then the
        # stop decides, and the allocation is censored.
        ended_by = "notice" if notice is not None and notice.reason != "sigterm" else "stop"
    elif notice is not None:
        ended_by = "notice"
    elif (
        stretch.closed_by == "next_start"
        or (now - stretch.end).total_seconds() > LOST_AFTER_HEARTBEATS * beat
    ):
        ended_by = "lost"
    else:
        ended_by = "running"
    agent_start = stretch.agent_start
    if stretch.from_boot and stretch.provider in BILLED_FROM_BOOT:
        agent_start = stretch.opened_at  # a VM is billed from machine boot, before the agent's start
    return Allocation(
        node=stretch.node,
        index=index,
        start=stretch.start,
        end=stretch.end,
        ended_by=ended_by,
        end_reason=end_reason,
        start_reason=opener.reason if opener.kind == "start" else None,
        kind=stretch.kind,
        provider=stretch.provider,
        region=first["region"],
        zone=first["zone"],
        instance_type=first["instance_type"],
        market=first["market"],
        currency=stretch.currency,
        price_source=price_source,
        prices=stretch.prices,
        notice=notice.time if notice is not None else None,
        ready=ready,
        agent_start=agent_start,
        phases=phases,
        last_seen=max(e.time for e in stretch.events),
        identifiers=frozenset(identifiers),
    )


def allocations(
    events: Sequence[Event], *, now: datetime | None = None, heartbeat_s: float | None = None
) -> tuple[list[Allocation], list[Gap], list[Problem]]:
    """Allocations (the billed stretches of spoteval.billing) and the gaps between them, per node."""
    now = now or utc_now()
    beat = heartbeat_s if heartbeat_s is not None else heartbeat_interval(events)
    by_node: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_node[e.node].append(e)
    out: list[Allocation] = []
    gaps: list[Gap] = []
    problems: list[Problem] = []
    for node in sorted(by_node):
        stretches, strays = billing.node_stretches(node, by_node[node])
        problems.extend(
            Problem(
                f"node {node}",
                "inconsistent",
                f"{e.kind} event at {format_time(e.time)} outside any allocation (no start before it)",
            )
            for e in strays
        )
        closed = [_allocation(s, i, now, beat) for i, s in enumerate(stretches, start=1)]
        for prev, nxt in itertools.pairwise(closed):
            if prev.ended_by in UNCENSORED:
                kind = "capacity"
            elif prev.end_reason in ("measurement", "simulated_preemption") or nxt.kind == "measurement":
                kind = "measurement"
            else:
                kind = "stopped"
            gaps.append(Gap(node, prev.end, max(prev.end, nxt.start), prev.ended_by, kind))
        out.extend(closed)
    return out, gaps, problems


def _with_dispatch(allocs: list[Allocation], attempts: Sequence[Attempt]) -> list[Allocation]:
    """Fill in each allocation's first dispatched attempt (from the attempts' start times)."""
    starts: dict[str, list[datetime]] = defaultdict(list)
    for attempt in attempts:
        starts[attempt.node].append(attempt.started)
    for times in starts.values():
        times.sort()
    out: list[Allocation] = []
    for a in allocs:
        first = next((t for t in starts.get(a.node, ()) if a.start <= t <= a.end), None)
        out.append(replace(a, first_dispatch=first) if first else a)
    return out


def allocation_of(allocs: Sequence[Allocation], node: str, t: datetime) -> Allocation | None:
    """The allocation of `node` holding time `t`, if any."""
    for a in allocs:
        if a.node == node and a.start <= t <= a.end:
            return a
    return None


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
    """tau from allocation lifetimes, through `spoteval.lifetime` (stopped and running: censored)."""
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
        efficiency=_efficiency(allocs, episodes, tau, boot, wait),
        problems=tuple(record.problems) + tuple(problems),
        generated=now,
    )


#: The source name the restart measurement (scripts/measure_restart.py) writes into its events.
MEASUREMENT_SOURCE: Final = "measure_restart"


def measurement_cycles(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The restart measurement's cycles, as it records each one: a heartbeat whose details carry
    `measured` (phase -> seconds), `s_wait_s` and `s_boot_s` (see scripts/measure_restart.py)."""
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


# --- the workload for the next run --------------------------------------------------------------


def workload_from_run(report: RunReport, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The placement workload (see spoteval.placement) with the numbers this run measured.

    Measured: episode length samples (minutes), concurrency, tau and its interval (hours), capacity
    wait W and restart overhead B (minutes: S_boot plus the billed notice tail per preemption, the
    time from a notice to the end of the allocation in which no new episode starts), the spot price
    (time-weighted mean of the logged spot prices), and the episode count (the manifest's).
    Everything the record cannot know (other options' prices, deadline, margin, grant) comes from
    `base`. With no preemption tau has no point estimate: the interval's lower bound is used, which
    favours the non-preemptible options (the cautious side).
    """
    out: dict[str, Any] = json.loads(json.dumps(dict(base or {})))
    ep = report.episodes
    if ep.manifest:
        out["episodes"] = ep.manifest
    elif ep.durations_s:
        out["episodes"] = len({a.episode_id for a in report.record.attempts})
    if ep.durations_s:
        out.pop("episode_minutes", None)
        out["episode_minutes_samples"] = [round(d / 60.0, 6) for d in ep.durations_s]
    if ep.concurrency:
        out["concurrency"] = ep.concurrency
    if report.tau is not None:
        tau_s = report.tau.seconds if report.tau.seconds is not None else report.tau.low_s
        if tau_s > 0:
            out["lifetime_hours"] = tau_s / 3600.0
            if report.tau.high_s is not None and report.tau.low_s > 0:
                out["lifetime_interval_hours"] = [report.tau.low_s / 3600.0, report.tau.high_s / 3600.0]
            else:
                out.pop("lifetime_interval_hours", None)
    restart = dict(out.get("restart") or {})
    if report.wait is not None:
        restart["wait_minutes"] = report.wait.mean / 60.0
    elif report.measured_wait is not None:
        restart["wait_minutes"] = report.measured_wait.mean / 60.0
    if report.boot is not None:
        restart["boot_minutes"] = (report.boot.mean + report.efficiency.notice_tail_s) / 60.0
    elif report.measured_boot is not None:
        restart["boot_minutes"] = report.measured_boot.mean / 60.0
    if restart:
        out["restart"] = restart
    spot = _mean_price(report.allocations, "spot")
    if spot is not None:
        prices = dict(out.get("prices") or {})
        prices["spot"] = spot
        out["prices"] = prices
    return out


def unmeasured(report: RunReport) -> list[str]:
    """Placement inputs this run could not measure (they must come from the base workload)."""
    out: list[str] = []
    if not report.episodes.durations_s:
        out.append("episode_minutes (no finished attempt)")
    if not report.episodes.concurrency:
        out.append("concurrency (no attempt)")
    if report.tau is None:
        out.append("lifetime_hours (no allocation)")
    elif report.tau.seconds is None:
        out.append("lifetime_hours (no preemption: the interval's lower bound is used)")
    if report.wait is None and report.measured_wait is None:
        out.append("restart.wait_minutes (no restart after a preemption)")
    if report.boot is None and report.measured_boot is None:
        out.append("restart.boot_minutes (no node reached its first episode)")
    if _mean_price(report.allocations, "spot") is None:
        out.append("prices.spot (no spot price logged)")
    return out


def _mean_price(allocs: Iterable[Allocation], market: str) -> float | None:
    cost = hours = 0.0
    for a in allocs:
        c = a.cost
        if a.market == market and c is not None and a.seconds > 0:
            cost += c
            hours += a.seconds / 3600.0
    if hours > 0:
        return cost / hours
    prices = [a.price for a in allocs if a.market == market and a.price is not None]
    return statistics.fmean(prices) if prices else None


def with_placement(
    report: RunReport, decide: Callable[[Mapping[str, Any]], Mapping[str, Any]], workload: Mapping[str, Any]
) -> RunReport:
    """The report with the placement decision for `workload` (the output of `decide`) attached."""
    try:
        result = dict(decide(workload))
        note = ""
    except Exception as exc:  # the decision is one section of the report, never its failure
        result, note = {}, f"no placement decision: {exc}"
    return replace(report, placement=result or None, placement_note=note)


# --- shared view (redaction) --------------------------------------------------------------------


def private_strings(report: RunReport) -> set[str]:
    """Every string in the run's record that a shared report must not carry."""
    found: set[str] = {report.record.run_id}
    url = report.record.store_url
    if url:
        found.add(url)
        parsed = urlparse(url)
        if parsed.netloc:
            found.add(parsed.netloc)
        if parsed.path.strip("/"):
            found.add(parsed.path.rstrip("/"))
    for e in report.record.events:
        found |= private_identifiers(e)
    for a in report.record.attempts:
        found.add(a.node)
    for r in report.record.results.values():
        found.add(r.node)
    return {s for s in found if s and len(s) >= 2}


def _aliases(report: RunReport) -> dict[str, str]:
    nodes: list[str] = []
    for a in report.allocations:
        if a.node not in nodes:
            nodes.append(a.node)
    return {n: f"node-{i}" for i, n in enumerate(nodes, start=1)}


_PLAIN = re.compile(r"^[A-Za-z0-9_.:-]{1,40}$")


def _shared_problems(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    """Problems by category, without keys or values (they may carry identifiers)."""
    counts = Counter(p.category for p in problems)
    fields: Counter[str] = Counter()
    for p in problems:
        if p.category == "unknown_field":
            for raw in p.message.split(":", 1)[-1].split(","):
                name = raw.strip()
                if _PLAIN.match(name):
                    fields[name] += 1
    out: list[dict[str, Any]] = [{"category": c, "count": counts[c]} for c in PROBLEM_CATEGORIES if counts[c]]
    if fields:
        out.append({"category": "unknown_field_names", "names": sorted(fields)})
    return out


# --- JSON ---------------------------------------------------------------------------------------


def _t(t: datetime | None, origin: datetime, shared: bool) -> Any:
    if t is None:
        return None
    return round((t - origin).total_seconds(), 3) if shared else format_time(t)


def origin_of(report: RunReport) -> datetime:
    times = [a.start for a in report.allocations] + [e.time for e in report.record.events]
    return min(times) if times else report.generated


def report_json(report: RunReport, *, shared: bool = False) -> dict[str, Any]:
    """The report as one JSON object. `shared` drops every identifier and absolute price."""
    origin = origin_of(report)
    alias = _aliases(report)
    allocs = []
    for a in report.allocations:
        item: dict[str, Any] = {
            "node": alias[a.node] if shared else a.node,
            "index": a.index,
            "kind": a.kind,
            "start": _t(a.start, origin, shared),
            "end": _t(a.end, origin, shared),
            "seconds": round(a.seconds, 3),
            "start_reason": a.start_reason,
            "ended_by": a.ended_by,
            "end_reason": a.end_reason,
            "censored": a.censored,
            "notice": _t(a.notice, origin, shared),
            "ready": _t(a.ready, origin, shared),
            "first_dispatch": _t(a.first_dispatch, origin, shared),
            "boot_s": a.boot_s,
            "provider": a.provider,
            "region": a.region,
            "instance_type": a.instance_type,
            "market": a.market,
        }
        if not shared:
            item.update(
                {
                    "zone": a.zone,
                    "price_per_hour": a.price,
                    "prices": [[format_time(t), p] for t, p in a.prices],
                    "currency": a.currency,
                    "price_source": a.price_source,
                    "cost": a.cost,
                    "identifiers": sorted(a.identifiers - {a.node}),
                }
            )
        allocs.append(item)
    ep = report.episodes
    eff = report.efficiency
    out: dict[str, Any] = {
        "shared": shared,
        "generated": None if shared else format_time(report.generated),
        "allocations": allocs,
        "tau": report.tau.to_json() if report.tau else None,
        "restart": {
            "wait": report.wait.to_json() if report.wait else None,
            "boot": report.boot.to_json() if report.boot else None,
            "notice_tail": _stat_json(report.notice_tail),
            "boot_phases": {k: v.to_json() for k, v in report.boot_phases.items()},
            "measurement": {
                "wait": report.measured_wait.to_json() if report.measured_wait else None,
                "boot": report.measured_boot.to_json() if report.measured_boot else None,
                "phases": {k: v.to_json() for k, v in report.measured_phases.items()},
            },
        },
        "episodes": {
            "manifest": ep.manifest,
            "completed": ep.completed,
            "model_failures": ep.model_failures,
            "pending": ep.pending,
            "attempts": dict(ep.attempts),
            "interrupted_episode_seconds": round(ep.interrupted_lost_s, 3),
            "interrupted_node_hours": ep.lost_node_hours,
            "concurrency": ep.concurrency,
            "concurrency_source": ep.concurrency_source,
            "episode_seconds": _stat_json(Stat.of(ep.durations_s)),
        },
        "efficiency": {
            "measured": eff.measured,
            "predicted": eff.predicted,
            "useful_node_hours": eff.useful_node_hours,
            "billed_node_hours": eff.billed_node_hours,
            "inputs": {
                "episodes": eff.episodes,
                "mean_episode_s": eff.mean_episode_s,
                "tau_s": eff.tau_s,
                "boot_s": eff.boot_s,
                "notice_tail_s": eff.notice_tail_s,
                "restart_overhead_s": eff.restart_overhead_s,
                "wait_s": eff.wait_s,
                "concurrency": eff.concurrency,
            },
            "note": eff.note,
        },
    }
    if shared:
        out["problems"] = _shared_problems(report.problems)
        out["cost"] = _shared_cost(report)
        out["placement"] = _shared_placement(report.placement)
        # the last net, as for the text: strings taken from the record (unknown reasons, phase
        # names) may still carry an identifier
        scrubbed: dict[str, Any] = scrub_json(out, private_strings(report))
        return scrubbed
    else:
        out["run_id"] = report.record.run_id
        out["store"] = report.record.store_url
        out["cost"] = {"by_currency": dict(report.cost), "unpriced_allocations": report.unpriced}
        out["lost_cost"] = _lost_cost(report)
        out["problems"] = [p.__dict__ for p in report.problems]
        out["placement"] = dict(report.placement) if report.placement else None
        out["placement_note"] = report.placement_note
    return out


def _stat_json(stat: Stat | None) -> dict[str, float] | None:
    return stat.to_json() if stat is not None else None


def _lost_cost(report: RunReport) -> dict[str, float]:
    """What the interrupted attempts' share of their node cost: price x episode time / concurrency."""
    c = report.episodes.concurrency
    out: dict[str, float] = defaultdict(float)
    if not c:
        return {}
    for a in report.record.attempts:
        if a.outcome != "interrupted":
            continue
        alloc = allocation_of(report.allocations, a.node, a.started)
        price = alloc.price_at(a.started) if alloc else None
        if alloc is None or price is None:
            continue
        end = min(a.ended, alloc.end)
        out[alloc.currency or "?"] += price * max(0.0, (end - a.started).total_seconds()) / 3600.0 / c
    return dict(out)


def _shared_cost(report: RunReport) -> dict[str, Any]:
    """Ratios only: the lost share of spend, and spot cost per useful node-hour vs its own price."""
    total = sum(report.cost.values())
    lost = sum(_lost_cost(report).values())
    eff = report.efficiency
    return {
        "lost_share": (lost / total) if total > 0 else None,
        "cost_per_useful_node_hour_over_price": (1.0 / eff.measured) if eff.measured else None,
        "unpriced_allocations": report.unpriced,
    }


def _shared_placement(placement: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not placement:
        return None
    options = placement.get("options") or {}
    costs = {k: v.get("expected_cost") for k, v in options.items() if isinstance(v, Mapping)}
    finite = [c for c in costs.values() if isinstance(c, int | float) and c > 0]
    cheapest = min(finite) if finite else None
    shared_options: dict[str, Any] = {}
    for name, opt in options.items():
        if not isinstance(opt, Mapping):
            continue
        cost = opt.get("expected_cost")
        shared_options[name] = {
            "cost_over_cheapest": (cost / cheapest) if cheapest and isinstance(cost, int | float) else None,
            "wall_hours": opt.get("wall_hours"),
            "efficiency": opt.get("efficiency"),
            "p_deadline": opt.get("p_deadline"),
            "eligible": opt.get("eligible"),
        }
    ratio = (placement.get("break_even") or {}).get("price_ratio")
    return {
        "decision": placement.get("decision"),
        "options": shared_options,
        "break_even": {
            "tau_hours": (placement.get("break_even") or {}).get("tau_hours"),
            "price_ratio": ratio,
        },
    }


# --- text ---------------------------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    """A duration in the unit that reads best: 42.1 s, 3.5 min, 2.40 h."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if abs(seconds) < 120:
        return f"{seconds:.1f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _money(value: float | None, currency: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f} {currency or ''}".strip() if value < 10 else f"{value:,.2f} {currency or ''}".strip()


def _stat_row(name: str, s: Stat | None) -> list[str]:
    if s is None:
        return [name, "0", "-", "-", "-"]
    return [name, str(s.n), fmt_s(s.median), fmt_s(s.p90), fmt_s(s.mean)]


def render(report: RunReport, *, shared: bool = False, width: int | None = None) -> str:
    """The report as text (rich tables, plain when written to a file or pipe)."""
    from io import StringIO

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = StringIO()
    console = Console(
        file=buf, width=width or 130, force_terminal=False, color_system=None, soft_wrap=True, highlight=False
    )
    say = functools.partial(console.print, markup=False)
    origin = origin_of(report)
    alias = _aliases(report)
    rec = report.record

    def when(t: datetime) -> str:
        if shared:
            return f"+{fmt_s((t - origin).total_seconds())}"
        return t.strftime("%m-%d %H:%M:%S")

    if shared:
        say("Run report (shared: no ids, addresses, bucket or account names, or prices)")
    else:
        say(f"Run report: run {rec.run_id} in {rec.store_url}")
    say(
        f"{len(rec.events)} events, {len(rec.attempts)} attempts, {len(rec.results)} results; "
        f"{len(report.problems)} problem(s) in the record"
    )

    table = Table(title="Allocations (billed from start to end)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in (
        "node",
        "#",
        "start (UTC)" if not shared else "start",
        "reason",
        "ended by",
        "lifetime",
        "boot B",
    ):
        table.add_column(col, overflow="fold")
    if not shared:
        table.add_column("price/h", justify="right")
        table.add_column("cost", justify="right")
    for a in report.allocations:
        ended = a.ended_by + (f" ({a.end_reason})" if a.end_reason else "")
        if a.ended_by == "lost":
            ended += ", no notice: ends at its last heartbeat"
        if a.censored:
            ended += ", censored"
        row = [
            alias[a.node] if shared else a.node,
            str(a.index),
            when(a.start),
            (a.start_reason or "-")
            + (" (measurement)" if a.kind == "measurement" and a.start_reason != "measurement" else ""),
            ended,
            fmt_s(a.seconds),
            fmt_s(a.boot_s),
        ]
        if not shared:
            row += [
                (f"{a.price:.4f}" if a.price is not None else "-"),
                (f"{a.cost:.4f}" if a.cost is not None else "-"),
            ]
        table.add_row(*[Text(c) for c in row])
    say(table)
    if not shared:
        sources = Counter(
            f"{a.currency or '?'} per hour, {a.price_source}"
            for a in report.allocations
            if a.price is not None
        )
        if sources:
            say("Prices: " + "; ".join(f"{k} ({v} allocation(s))" for k, v in sources.items()))

    tau = report.tau
    if tau is None:
        say("Lifetime tau: no allocations in the record")
    else:
        pct = round(tau.confidence * 100)
        high = fmt_s(tau.high_s) if tau.high_s is not None else "unbounded"
        if tau.seconds is None:
            say(
                f"Lifetime tau: no preemption in {fmt_s(tau.uptime_s)} of uptime; "
                f"{pct}% lower bound {fmt_s(tau.low_s)}"
            )
        else:
            say(
                f"Lifetime tau: {fmt_s(tau.seconds)} ({pct}% interval {fmt_s(tau.low_s)} - {high}) "
                f"from {tau.preemptions} preemption(s) in {fmt_s(tau.uptime_s)} of uptime; "
                f"{tau.censored} censored (stopped by us or still running)"
            )
        for w in tau.warnings:
            say(f"  warning: {w}")

    st = Table(
        title="Restart cost S = S_wait + S_boot (per restart)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for col in ("", "n", "median", "p90", "mean"):
        st.add_column(col, justify="left" if not col else "right")
    st.add_row(*_stat_row("S_wait: preemption -> next start", report.wait))
    st.add_row(*_stat_row("S_boot: start -> first episode", report.boot))
    st.add_row(*_stat_row("notice -> end (billed, no new episodes)", report.notice_tail))
    for k, s in sorted(report.boot_phases.items()):
        st.add_row(*_stat_row(f"  {k}", s))
    if report.measured_wait or report.measured_boot or report.measured_phases:
        st.add_row(
            *_stat_row("restart measurement S_wait (start requested -> running)", report.measured_wait)
        )
        st.add_row(*_stat_row("restart measurement S_boot (running -> serving)", report.measured_boot))
        for k, s in sorted(report.measured_phases.items()):
            st.add_row(*_stat_row(f"  measurement {k}", s))
    say(st)

    ep = report.episodes
    att = ep.attempts
    say(
        f"Episodes: {ep.manifest if ep.manifest is not None else '?'} in the manifest; "
        f"{ep.completed} completed, {ep.model_failures} final model failures, "
        f"{ep.pending if ep.pending is not None else '?'} pending"
    )
    say(
        f"Attempts: {sum(att.values())} ({', '.join(f'{k} {v}' for k, v in sorted(att.items())) or 'none'}); "
        f"concurrency {ep.concurrency or '?'} ({ep.concurrency_source})"
    )
    lost_h = ep.lost_node_hours
    lost_line = f"Interrupted attempts lost {fmt_s(ep.interrupted_lost_s)} of episode time" + (
        f" = {lost_h:.4f} GPU node-hours" if lost_h is not None else ""
    )
    if shared:
        share = _shared_cost(report)["lost_share"]
        if share is not None:
            lost_line += f" ({share:.1%} of the spend)"
    else:
        lost_cost = _lost_cost(report)
        if lost_cost:
            lost_line += " costing " + ", ".join(_money(v, k) for k, v in lost_cost.items())
    say(lost_line)
    if not shared:
        spend = ", ".join(_money(v, k) for k, v in sorted(report.cost.items())) or "unknown"
        extra = f" ({report.unpriced} allocation(s) without a logged price)" if report.unpriced else ""
        billed = sum(a.seconds for a in report.allocations) / 3600.0
        say(f"Cost: {spend} for {billed:.4f} billed node-hours{extra}")

    eff = report.efficiency
    if eff.measured is None:
        say(f"Efficiency: not measurable ({eff.note or 'no billed time'})")
    else:
        pred = f"{eff.predicted:.3f}" if eff.predicted is not None else "-"
        dev = ""
        if eff.predicted:
            dev = f" ({(eff.measured - eff.predicted) / eff.predicted:+.1%})"
        say(
            f"Efficiency (useful / billed node time): measured {eff.measured:.3f}, closed form {pred}{dev} "
            f"for D = {fmt_s(eff.mean_episode_s)} (mean of {eff.episodes}), tau = {fmt_s(eff.tau_s)}, "
            f"B = {fmt_s(eff.restart_overhead_s)} (S_boot {fmt_s(eff.boot_s)} + notice tail "
            f"{fmt_s(eff.notice_tail_s)} per preemption), C = {eff.concurrency}"
            + (f"; {eff.note}" if eff.note else "")
        )

    if report.problems:
        if shared:
            parts = [
                f"{p['count']} {p['category']}" for p in _shared_problems(report.problems) if "count" in p
            ]
            say("Problems in the record: " + ", ".join(parts))
        else:
            say("Problems in the record (reported, not fatal):")
            grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
            for p in report.problems:
                grouped[(p.category, p.message)].append(p.key)
            for (cat, msg), keys in list(grouped.items())[:40]:
                more = f" (+{len(keys) - 1} more)" if len(keys) > 1 else ""
                say(f"  [{cat}] {keys[0]}: {msg}{more}")
            if len(grouped) > 40:
                say(f"  ... and {len(grouped) - 40} more kinds of problem")

    _render_placement(say, report, shared)
    text = buf.getvalue()
    if shared:
        text = scrub(text, private_strings(report))
    return text


def _render_placement(say: Callable[..., None], report: RunReport, shared: bool) -> None:
    p = report.placement
    if not p:
        if report.placement_note:
            say(f"Placement for the next run: {report.placement_note}")
        return
    say(f"Placement for the next run (from these measured numbers): {p.get('decision')}")
    if shared:
        sp = _shared_placement(p) or {}
        for name, opt in (sp.get("options") or {}).items():
            ratio = opt.get("cost_over_cheapest")
            eff = opt.get("efficiency")
            say(
                f"  {name}: expected cost {ratio:.2f} x the cheapest"
                if ratio is not None
                else f"  {name}: -",
                f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
                f", eligible {opt.get('eligible')}",
                sep="",
            )
        return
    for reason in p.get("reasons") or []:
        say(f"  - {reason}")
    for name, opt in (p.get("options") or {}).items():
        if isinstance(opt, Mapping):
            cost = opt.get("expected_cost")
            eff = opt.get("efficiency")
            wall = opt.get("wall_hours")
            say(
                f"  {name}: expected cost {cost:.2f}" if isinstance(cost, int | float) else f"  {name}:",
                f", wall {wall:.2f} h" if isinstance(wall, int | float) else "",
                f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
                "" if opt.get("eligible", True) else f", not eligible: {opt.get('why_not')}",
                sep="",
            )
    if report.placement_note:
        say(f"  ({report.placement_note})")


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every private string in `text` (longest first) with `[private]`."""
    for s in sorted(set(secrets), key=len, reverse=True):
        if s:
            text = text.replace(s, "[private]")
    return text


def scrub_json(value: Any, secrets: Iterable[str]) -> Any:
    """`scrub` applied to every string (keys too) of a JSON-like value."""
    private = sorted({s for s in secrets if s}, key=len, reverse=True)

    def clean(text: str) -> str:
        for s in private:
            text = text.replace(s, "[private]")
        return text

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return clean(v)
        if isinstance(v, Mapping):
            return {clean(str(k)): walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


# --- plot ---------------------------------------------------------------------------------------


def plot_timeline(report: RunReport, path: str, *, shared: bool = False) -> None:
    """A timeline per node (waiting for capacity, booting, serving; notices and preemptions marked)
    above the count of episodes completed over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    origin = origin_of(report)
    alias = _aliases(report)
    nodes = list(alias)

    def x(t: datetime) -> float:
        return (t - origin).total_seconds()

    fig, (ax, bx) = plt.subplots(
        2,
        1,
        figsize=(11, 2.2 + 0.6 * max(1, len(nodes)) + 2.4),
        sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(nodes)) * 0.6 + 0.6, 2.4]},
    )
    colors = {
        "waiting": "#d9d9d9",
        "booting": "#f4a259",
        "serving": "#5b8e7d",
        "notice": "#f2d57e",
        "measurement": "#8da9c4",
    }
    for i, node in enumerate(nodes):
        y = len(nodes) - 1 - i
        for g in report.gaps:
            if g.node == node:
                color = colors["waiting"] if g.kind == "capacity" else "#f0f0f0"
                ax.broken_barh(
                    [(x(g.begin), g.seconds)],
                    (y - 0.3, 0.6),
                    color=color,
                    hatch="//" if g.kind == "capacity" else None,
                    edgecolor="#b0b0b0",
                    linewidth=0,
                )
        for a in report.allocations:
            if a.node != node:
                continue
            boot_end = a.first_dispatch or a.ready or a.end
            boot_end = min(max(boot_end, a.start), a.end)
            if a.kind == "measurement":
                ax.broken_barh([(x(a.start), a.seconds)], (y - 0.3, 0.6), color=colors["measurement"])
                continue
            ax.broken_barh(
                [(x(a.start), (boot_end - a.start).total_seconds())], (y - 0.3, 0.6), color=colors["booting"]
            )
            serve_end = min(max(a.notice or a.end, boot_end), a.end)
            ax.broken_barh(
                [(x(boot_end), (serve_end - boot_end).total_seconds())],
                (y - 0.3, 0.6),
                color=colors["serving"],
            )
            if serve_end < a.end:
                ax.broken_barh(
                    [(x(serve_end), (a.end - serve_end).total_seconds())],
                    (y - 0.3, 0.6),
                    color=colors["notice"],
                )
            if a.notice is not None:
                ax.plot(
                    [x(a.notice)], [y + 0.42], marker="v", color="#e0a800", markersize=8, linestyle="none"
                )
            if a.ended_by in ("preempted", "notice"):
                ax.plot([x(a.end)], [y], marker="x", color="#c0392b", markersize=9, mew=2, linestyle="none")
            elif a.ended_by == "lost":
                ax.plot([x(a.end)], [y], marker="X", color="#7b241c", markersize=9, linestyle="none")
            elif a.ended_by == "stop":
                ax.plot([x(a.end)], [y], marker="s", color="black", markersize=6, linestyle="none")
    ax.set_yticks(range(len(nodes)))
    ax.set_yticklabels([alias[n] if shared else n for n in reversed(nodes)])
    ax.set_ylim(-0.8, len(nodes) - 0.2)
    handles = [
        Patch(color=colors["waiting"], label="waiting for capacity"),
        Patch(color=colors["booting"], label="booting (start -> first episode)"),
        Patch(color=colors["serving"], label="serving episodes"),
        Patch(color=colors["notice"], label="notice -> end (no new episodes)"),
        Line2D([], [], marker="v", color="#e0a800", linestyle="none", label="notice"),
        Line2D([], [], marker="x", color="#c0392b", mew=2, linestyle="none", label="preempted"),
        Line2D([], [], marker="X", color="#7b241c", linestyle="none", label="lost without notice"),
        Line2D([], [], marker="s", color="black", linestyle="none", label="stopped"),
    ]
    if any(a.kind == "measurement" for a in report.allocations):
        handles.append(Patch(color=colors["measurement"], label="restart measurement"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1.0 + 0.9 / (len(nodes) + 1.5)),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    ax.set_title("Allocations per node", loc="left", fontsize=10, pad=38)

    done = sorted(r.ended for r in report.record.results.values() if r.outcome == "completed")
    failed = sorted(r.ended for r in report.record.results.values() if r.outcome == "model_failure")
    if done:
        bx.step(
            [x(t) for t in done], range(1, len(done) + 1), where="post", color="#5b8e7d", label="completed"
        )
    if failed:
        bx.step(
            [x(t) for t in failed],
            range(1, len(failed) + 1),
            where="post",
            color="#c0392b",
            label="final model failures",
        )
    interrupted = sorted(a.ended for a in report.record.attempts if a.outcome == "interrupted")
    if interrupted:
        bx.step(
            [x(t) for t in interrupted],
            range(1, len(interrupted) + 1),
            where="post",
            color="#e0a800",
            label="interrupted attempts",
        )
    bx.set_ylabel("episodes")
    bx.set_xlabel("seconds since the first start")
    bx.legend(loc="upper left", fontsize=8, frameon=False)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = [
    "Allocation",
    "Efficiency",
    "Episodes",
    "Gap",
    "Problem",
    "ReportError",
    "RunRecord",
    "RunReport",
    "Stat",
    "Tau",
    "allocations",
    "analyse",
    "load_run",
    "parse_record",
    "plot_timeline",
    "render",
    "report_json",
    "with_placement",
    "workload_from_run",
]
