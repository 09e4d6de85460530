"""What the run record says about earlier incarnations, read once when the agent starts.

An *incarnation* is one run of the agent process; every event it writes carries
`details.incarnation` (a random id). The decisions here are pure functions of the record:

- `start_reason`: `initial` (nothing before, or joining a run whose other nodes are alive),
  `restart_after_preemption` (the previous incarnation of this node, or else the run's latest one,
  saw a stopping notice, has a `preempted` event after its start, or was lost: its last event is
  not a `stop`), `restart_after_stop` (it ended with a `stop` event).
- `lost_attempts`: attempts an incarnation had in flight when it was lost. Before the agent
  starts episodes it makes a heartbeat event durable whose `details.in_flight` maps each episode
  in flight to `[dispatch number, started]`; an entry stays in every later heartbeat and notice
  until that attempt is durable in the store. So the last event of a lost incarnation that carries
  `in_flight` lists a superset of what it had not recorded; the entries that no attempt under
  `attempts/` matches (by `details.incarnation` and `details.dispatch`) were in flight when it was
  lost, and the next incarnation records them as `interrupted`. It then lists the incarnations it
  checked in its start event's `details.resolved`, so later starts skip them.
- `billed`: node time and money of the run as spoteval/billing.py counts them (the grant's checks
  and the run report count the same): from each start's `billed_from` (machine boot on VM
  providers, else agent start) to its stop or preemption (or last event), overlaps on one node
  counted once, at the prices the record logged.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spoteval import billing
from spoteval.record import Attempt, Event, RecordError, RunLayout, format_time, parse_time
from spoteval.store import Store

STALE_HEARTBEATS = 3  # an incarnation of another node silent for this many heartbeats (+ 60 s) is lost


@dataclass(frozen=True)
class Incarnation:
    id: str
    node: str
    events: tuple[Event, ...]  # sorted by time

    @property
    def first(self) -> Event:
        return self.events[0]

    @property
    def last(self) -> Event:
        return self.events[-1]

    @property
    def start(self) -> Event | None:
        return next((e for e in self.events if e.kind == "start"), None)

    @property
    def began(self) -> datetime:
        start = self.start
        return start.time if start is not None else self.first.time

    def billed_from(self) -> datetime:
        """When the bill for this incarnation began: its start event's `billed_from` (machine boot
        on VM providers), else its first event."""
        start = self.start
        value = start.details.get("billed_from") if start is not None else None
        if isinstance(value, str):
            try:
                return min(parse_time(value), self.began)
            except RecordError:
                pass
        return self.began

    def price(self) -> float | None:
        start = self.start
        return start.price_per_hour if start is not None else None

    def heartbeat_s(self) -> float:
        start = self.start
        value = start.details.get("heartbeat_s") if start is not None else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 30.0

    def stopping_notice(self) -> Event | None:
        return next(
            (e for e in self.events if e.kind == "notice" and e.reason != "rebalance_recommendation"), None
        )

    def last_in_flight(self) -> list[tuple[str, int, datetime]]:
        """(episode, dispatch, started) from the last event that lists what was in flight."""
        for e in reversed(self.events):
            raw = e.details.get("in_flight")
            if isinstance(raw, list):
                return _in_flight(raw)
        return []


@dataclass(frozen=True)
class History:
    events: tuple[Event, ...]
    incarnations: Mapping[str, Incarnation]
    results: frozenset[str]
    attempt_numbers: Mapping[str, tuple[int, ...]]  # episode -> numbers present under attempts/
    attempts: Mapping[str, tuple[Attempt, ...]] = field(default_factory=dict)  # only episodes read
    problems: tuple[str, ...] = ()

    def resolved(self) -> set[str]:
        out: set[str] = set()
        for e in self.events:
            if e.kind == "start":
                value = e.details.get("resolved")
                if isinstance(value, list):
                    out.update(str(v) for v in value)
        return out


@dataclass(frozen=True)
class LostAttempt:
    episode_id: str
    incarnation: str
    dispatch: int
    node: str
    started: datetime
    last_seen: datetime  # the lost incarnation's last event


def _in_flight(raw: Sequence[Any]) -> list[tuple[str, int, datetime]]:
    """Parse `details.in_flight`: a list of `[episode, dispatch, started]`; malformed entries are skipped."""
    out: list[tuple[str, int, datetime]] = []
    for value in raw:
        try:
            episode, dispatch, started = value
            out.append((str(episode), int(dispatch), parse_time(started)))
        except (TypeError, ValueError, RecordError):
            continue
    return out


def group_incarnations(events: Iterable[Event]) -> dict[str, Incarnation]:
    grouped: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        inc = e.details.get("incarnation")
        if isinstance(inc, str) and inc:
            grouped[inc].append(e)
    return {
        inc: Incarnation(inc, evs[0].node, tuple(sorted(evs, key=lambda e: e.time)))
        for inc, evs in grouped.items()
    }


def is_over(inc: Incarnation, node: str, now: datetime) -> bool:
    """Whether an incarnation has ended: this node's earlier ones always, others when stopped or silent."""
    if inc.node == node or inc.last.kind == "stop":
        return True
    silent = (now - inc.last.time).total_seconds()
    return silent > STALE_HEARTBEATS * inc.heartbeat_s() + 60


def start_reason(history: History, node: str, now: datetime) -> tuple[str, dict[str, Any]]:
    """The start reason and the evidence for it (see the module's docstring)."""
    incs = list(history.incarnations.values())
    if not incs:
        return "initial", {}
    mine = [i for i in incs if i.node == node]
    if mine:
        previous = max(mine, key=lambda i: i.last.time)
    else:
        if any(not is_over(i, node, now) for i in incs):
            return "initial", {"joined_live_run": True}
        previous = max(incs, key=lambda i: i.last.time)
    evidence: str | None = None
    notice = previous.stopping_notice()
    # Stops written by others (restart measurement, an operator), not by an agent. One after the
    # previous incarnation began means the SIGTERM it saw was that stop's shutdown: no evidence of a
    # preemption, unless the provider's `preempted` event comes after it.
    outside = [
        e
        for e in history.events
        if e.kind == "stop"
        and e.node == previous.node
        and e.time >= previous.began
        and "incarnation" not in e.details
    ]
    stopped = max(outside, key=lambda e: e.time, default=None)
    taken_after = stopped is not None and any(
        e.kind == "preempted" and e.node == previous.node and e.time >= stopped.time for e in history.events
    )
    if stopped is not None and not taken_after:
        evidence = None
    elif notice is not None:
        evidence = f"notice:{notice.reason}"
    elif any(
        e.kind == "preempted" and e.node == previous.node and e.time >= previous.began for e in history.events
    ):
        evidence = "preempted"
    elif previous.last.kind != "stop":
        evidence = "lost"
    details: dict[str, Any] = {
        "previous": {
            "incarnation": previous.id,
            "node": previous.node,
            "last_kind": previous.last.kind,
            "last_reason": previous.last.reason,
            "last_time": format_time(previous.last.time),
        }
    }
    if evidence is None:
        if stopped is not None:
            details["previous"]["stopped_by"] = stopped.reason
        return "restart_after_stop", details
    details["previous"]["evidence"] = evidence
    return "restart_after_preemption", details


# --- recovery planning: what a starting agent does about the record (the loop only applies it) --


@dataclass(frozen=True)
class Recovery:
    """What a starting agent makes of the record, before it starts anything."""

    reason: str  # the start reason
    details: Mapping[str, Any]  # its evidence
    resolved: tuple[str, ...]  # the ended incarnations checked for lost attempts (sorted)
    lost: tuple[LostAttempt, ...]  # attempts lost with an earlier incarnation
    interrupted: tuple[Attempt, ...]  # their records (`interrupted`), for episodes of this manifest
    results: tuple[Attempt, ...]  # recorded final attempts whose result is missing: written now
    final: frozenset[str]  # episodes with a final outcome (a result, or one written now)
    pending: tuple[str, ...]  # episodes still to run, in manifest order
    failures: Mapping[str, int]  # recorded model failures per episode not yet final or with one now
    next_n: Mapping[str, int]  # the next attempt number per episode with attempts recorded


def plan_recovery(
    history: History,
    node: str,
    now: datetime,
    episodes: Sequence[str],
    *,
    max_attempts: int,
    incarnation: str,
) -> Recovery:
    """Decide from the record alone: the start reason, the attempts an earlier incarnation lost
    (recorded now as `interrupted` by `incarnation`, under the next free attempt numbers), the
    results to write from recorded attempts (the last completed one, or the last model failure once
    `max_attempts` failed), and what is left to run."""
    reason, details = start_reason(history, node, now)
    incs = unresolved(history, node, now)
    lost = lost_attempts(lost_candidates(incs), history.attempts)
    next_n = {episode: max(numbers) + 1 for episode, numbers in history.attempt_numbers.items()}
    known = set(episodes)
    interrupted: list[Attempt] = []
    for item in lost:
        if item.episode_id not in known:
            continue
        n = next_n.get(item.episode_id, 1)
        next_n[item.episode_id] = n + 1
        interrupted.append(
            Attempt(
                episode_id=item.episode_id,
                outcome="interrupted",
                attempt=n,
                node=item.node,
                started=item.started,
                ended=item.last_seen,
                error=f"node lost: incarnation {item.incarnation} recorded no end for this attempt",
                details={
                    "incarnation": item.incarnation,
                    "dispatch": item.dispatch,
                    "recorded_by": incarnation,
                    "lost": True,
                },
            )
        )
    final: set[str] = set()
    pending: list[str] = []
    failures: dict[str, int] = {}
    results: list[Attempt] = []
    for episode in episodes:
        if episode in history.results:
            final.add(episode)
            continue
        attempts = history.attempts.get(episode, ())
        failed = [a for a in attempts if a.outcome in ("model_failure", "harness_error")]
        completed = [a for a in attempts if a.outcome == "completed"]
        failures[episode] = len(failed)
        last = completed[-1] if completed else (failed[-1] if len(failed) >= max_attempts else None)
        if last is not None:  # the attempt is recorded, its result is not
            results.append(last)
            final.add(episode)
        else:
            pending.append(episode)
    return Recovery(
        reason=reason,
        details=details,
        resolved=tuple(sorted(i.id for i in incs)),
        lost=tuple(lost),
        interrupted=tuple(interrupted),
        results=tuple(results),
        final=frozenset(final),
        pending=tuple(pending),
        failures=failures,
        next_n=next_n,
    )


def unresolved(history: History, node: str, now: datetime) -> list[Incarnation]:
    """Incarnations that have ended and whose in-flight attempts no start has checked yet."""
    done = history.resolved()
    return [i for i in history.incarnations.values() if i.id not in done and is_over(i, node, now)]


def lost_candidates(incs: Iterable[Incarnation]) -> list[LostAttempt]:
    out: list[LostAttempt] = []
    for inc in incs:
        for episode, dispatch, started in inc.last_in_flight():
            out.append(LostAttempt(episode, inc.id, dispatch, inc.node, started, max(started, inc.last.time)))
    return out


def lost_attempts(
    candidates: Iterable[LostAttempt], attempts: Mapping[str, Iterable[Attempt]]
) -> list[LostAttempt]:
    """The candidates that no recorded attempt accounts for."""
    recorded: set[tuple[str, str, int]] = set()
    for episode, items in attempts.items():
        for a in items:
            inc, dispatch = a.details.get("incarnation"), a.details.get("dispatch")
            if isinstance(inc, str) and isinstance(dispatch, int):
                recorded.add((episode, inc, dispatch))
    return [c for c in candidates if (c.episode_id, c.incarnation, c.dispatch) not in recorded]


#: The agent's billing view: spoteval/billing.py, the model the grant checks and the report use too.
Interval = billing.Interval
Billed = billing.Billed


def billed(intervals: Iterable[Interval]) -> Billed:
    """Node time and money of a run: per node, overlapping intervals count once (an agent
    restarted without a reboot shares its machine's bill); different nodes add up."""
    return billing.total(intervals)


def intervals(history: History, fallback_price: float | None) -> list[Interval]:
    """The record's billed intervals (spoteval.billing), unpriced time at `fallback_price`."""
    return billing.agent_intervals(history.events, fallback_price)


# --- reading (I/O) ------------------------------------------------------------------------------


def read_events(store: Store, layout: RunLayout, pool: ThreadPoolExecutor) -> tuple[list[Event], list[str]]:
    keys = store.list(layout.events_prefix)
    problems: list[str] = []
    events: list[Event] = []
    for key, data in zip(keys, pool.map(store.get, keys), strict=True):
        if data is None:
            continue
        try:
            event, issues = Event.loads(data)
        except RecordError as exc:
            problems.append(f"{key}: {exc}")
            continue
        problems.extend(f"{key}: {p}" for p in issues)
        events.append(event)
    events.sort(key=lambda e: e.time)
    return events, problems


def read_attempts(
    store: Store, layout: RunLayout, numbers: Mapping[str, Iterable[int]], pool: ThreadPoolExecutor
) -> tuple[dict[str, tuple[Attempt, ...]], list[str]]:
    keys = [layout.attempt(e, n) for e, ns in numbers.items() for n in sorted(ns)]
    out: dict[str, list[Attempt]] = defaultdict(list)
    problems: list[str] = []
    for key, data in zip(keys, pool.map(store.get, keys), strict=True):
        if data is None:
            continue
        try:
            attempt, issues = Attempt.loads(data)
        except RecordError as exc:
            problems.append(f"{key}: {exc}")
            continue
        problems.extend(f"{key}: {p}" for p in issues)
        out[attempt.episode_id].append(attempt)
    return {e: tuple(sorted(a, key=lambda x: x.attempt)) for e, a in out.items()}, problems


def read_history(
    store: Store,
    layout: RunLayout,
    episode_ids: Iterable[str],
    *,
    node: str,
    now: datetime,
    pool: ThreadPoolExecutor,
    extra_events: Iterable[Event] = (),
) -> History:
    """Read events, results and attempt numbers; attempts only of episodes that need a look.
    `extra_events` (what the local spool still holds) count as if they were in the store already."""
    events, problems = read_events(store, layout, pool)
    seen = {json.dumps(e.to_json(), sort_keys=True) for e in events}
    for extra in extra_events:
        if json.dumps(extra.to_json(), sort_keys=True) not in seen:  # not uploaded yet
            events.append(extra)
    events.sort(key=lambda e: e.time)
    results = frozenset(
        e for e in (layout.episode_of_result(k) for k in store.list(layout.results_prefix)) if e is not None
    )
    numbers: dict[str, list[int]] = defaultdict(list)
    for key in store.list(layout.attempts_prefix):
        parsed = layout.attempt_of_key(key)
        if parsed is not None:
            numbers[parsed[0]].append(parsed[1])
    history = History(
        events=tuple(events),
        incarnations=group_incarnations(events),
        results=results,
        attempt_numbers={e: tuple(sorted(ns)) for e, ns in numbers.items()},
        problems=tuple(problems),
    )
    wanted = {e for e in episode_ids if e not in results}
    wanted.update(c.episode_id for c in lost_candidates(unresolved(history, node, now)))
    attempts, more = read_attempts(store, layout, {e: numbers[e] for e in wanted if e in numbers}, pool)
    return History(
        events=history.events,
        incarnations=history.incarnations,
        results=results,
        attempt_numbers=history.attempt_numbers,
        attempts=attempts,
        problems=(*history.problems, *more),
    )
