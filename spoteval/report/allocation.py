"""Allocations: the billed stretches of spoteval.billing as the report sees them, and the gaps between."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from spoteval import billing
from spoteval.events.match import has_provider_events, reconcile
from spoteval.providers import BILLED_FROM_BOOT
from spoteval.record import Attempt, Event, format_time, utc_now
from spoteval.redaction import PRIVATE_DETAIL_KEYS, private_identifiers
from spoteval.report.load import DEFAULT_HEARTBEAT_S, LOST_AFTER_HEARTBEATS, Problem

# --- allocations --------------------------------------------------------------------------------

#: How an allocation ended.
ENDINGS: Final = ("preempted", "notice", "lost", "stop", "running")
UNCENSORED: Final = frozenset({"preempted", "notice", "lost"})


@dataclass(frozen=True)
class Allocation(billing.PricedTime):
    """One stretch of a node holding capacity: from a start to the end the record shows (its length,
    first price and cost: spoteval.billing)."""

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
    #: the model server's start-up by phase, from its own log (the `ready` event's `server_phases`)
    server_phases: Mapping[str, float] = field(default_factory=dict)
    #: what its log said of its caches (`compile_cache`, `model_info_cache`: loaded, compiled, ...)
    server_log: Mapping[str, Any] = field(default_factory=dict)
    last_seen: datetime | None = None
    identifiers: frozenset[str] = frozenset()

    @property
    def censored(self) -> bool:
        return self.ended_by not in UNCENSORED

    def price_at(self, t: datetime) -> float | None:
        """The price in force at time `t` (the last one logged at or before it)."""
        price = None
        for when, p in self.prices:
            if when <= t or price is None:
                price = p
        return price

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


def _server_start(details: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """The `ready` event's `server_phases` (numbers only, in their order) and `server_log`."""
    raw = details.get("server_phases")
    found = {
        str(k): float(v)
        for k, v in (raw.items() if isinstance(raw, Mapping) else ())
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    log = details.get("server_log")
    return found, dict(log) if isinstance(log, Mapping) else {}


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
    server: tuple[dict[str, float], dict[str, Any]] = ({}, {})
    identifiers: set[str] = set()
    for e in stretch.events:
        identifiers |= private_identifiers(e)
        if e.price_per_hour is not None and e.price_per_hour != last_price:
            last_price = e.price_per_hour
            if price_source == "unknown":
                price_source = e.price_source
        if e is not opener and e.kind == "ready" and ready is None:
            # the server's own durations (`server_log.reported`) repeat its phases: not phases here
            numeric = {k: v for k, v in e.details.items() if k != "server_log"}
            ready, phases, server = e.time, _numeric_phases(numeric), _server_start(e.details)
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
    if stretch.from_boot and stretch.provider in BILLED_FROM_BOOT and stretch.agent_start is None:
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
        server_phases=server[0],
        server_log=server[1],
        last_seen=max(e.time for e in stretch.events),
        identifiers=frozenset(identifiers),
    )


def allocations(
    events: Sequence[Event], *, now: datetime | None = None, heartbeat_s: float | None = None
) -> tuple[list[Allocation], list[Gap], list[Problem]]:
    """Allocations (the billed stretches of spoteval.billing) and the gaps between them, per node.
    The provider's own events count once beside the agent's (spoteval/events/match.py)."""
    now = now or utc_now()
    if has_provider_events(events):
        events = reconcile(events)[0]
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
