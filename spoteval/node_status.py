"""What a node is doing, from the run record (and the provider's state when it was read): one status
that the operator, `scripts.operate status` and the run report all compute with the same functions
(so it sits below both packages: the operator asks the placement for the deadline rule, and the
placement's `--from-run` reads the run through the report).

Statuses:

- `serving`: the node holds capacity and spot-eval started it (the provider says running, or the
  record shows it alive, after a `start` in the record).
- `unrecorded`: the provider says running, but the record has no `start` of it: spot-eval did not
  start it (or its agent has not written its first event yet). Never called serving, never
  touched by the operator.
- `starting`: the provider says the node is being started.
- `preempted`: the provider took the node and work remains: it waits for capacity (S_wait runs).
- `stopped_by_rule`: a stop rule stopped it (a `stop` event with a `stop_rule:*` reason), or the
  user's grant refuses to start it again now (the operator's journal says why).
- `stopped`: stopped by a person or a measurement (`stop` with reason `user`, `measurement`, or a
  `done` of its own share), never started by spot-eval, or gone (terminated).
- `done`: every episode of the run has its result.
- `unknown`: the provider's state could not be mapped.

Pure functions of their arguments: nothing here reads a clock, the store or a provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from spoteval.clouds import NodeState
from spoteval.record import Event, format_time

SERVING: Final = "serving"
UNRECORDED: Final = "unrecorded"
STARTING: Final = "starting"
PREEMPTED: Final = "preempted"
STOPPED_BY_RULE: Final = "stopped_by_rule"
STOPPED: Final = "stopped"
DONE: Final = "done"
UNKNOWN: Final = "unknown"
LABELS: Final = {
    SERVING: "serving",
    UNRECORDED: "running, not started by spot-eval",
    STARTING: "starting",
    PREEMPTED: "preempted, waiting for capacity",
    STOPPED_BY_RULE: "stopped by a rule",
    STOPPED: "stopped",
    DONE: "done",
    UNKNOWN: "unknown",
}
#: A node whose record is silent this many heartbeat intervals (plus a minute) was lost.
LOST_AFTER_HEARTBEATS: Final = 3.0


@dataclass(frozen=True)
class Refusal:
    """The operator's record of the grant refusing a start (its journal, see spoteval.operate.journal)."""

    time: datetime
    node: str
    reason: str  # stop_rule:price_cap, stop_rule:budget, stop_rule:max_runtime, grant:regions, ...
    message: str


@dataclass(frozen=True)
class NodeStatus:
    node: str
    status: str
    reason: str | None  # the stop reason, the refusal, or the evidence of a preemption
    since: datetime | None  # from when the record shows this status
    detail: str
    state: NodeState | None = None  # the provider's state, when it was read
    retry: bool = True  # False when only a person (or a new grant) can start it again
    taken_at: datetime | None = None  # when the record shows the provider took it (preempted, refused)
    evidence: str | None = None  # how: `notice:<reason>`, `preempted:provider` or `lost`
    last_seen: datetime | None = None  # the node's last event in the record
    stopped_itself: bool = False  # the record has a `stop` of the node after its last start

    @property
    def label(self) -> str:
        text = LABELS.get(self.status, self.status)
        return f"{text} ({self.reason})" if self.reason and self.status != PREEMPTED else text

    @property
    def running(self) -> bool:
        return self.state is not None and self.state.status in ("running", "pending")

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status,
            "label": self.label,
            "reason": self.reason,
            "since": format_time(self.since) if self.since else None,
            "detail": self.detail,
            "taken_at": format_time(self.taken_at) if self.taken_at else None,
            "state": None if self.state is None else {"status": self.state.status, "raw": self.state.raw},
        }


def record_node(node_id: str) -> str:
    """The name a node has in the run record: the last segment of a resource path (GCP, Azure ids),
    which is what the node's agent reads from its metadata service."""
    return node_id.rstrip("/").rsplit("/", 1)[-1] or node_id


def node_events(events: Iterable[Event], node: str, *, group: bool = False) -> list[Event]:
    """The node's events, in time order. A pool's group (`group=True`) is the whole run: its members
    come and go with ids nobody knew in advance, and every event of the run is one of theirs."""
    if group:
        return sorted(events, key=lambda e: e.time)
    name = record_node(node)
    return sorted((e for e in events if e.node in (node, name)), key=lambda e: e.time)


def _taken(events: Sequence[Event]) -> Event | None:
    """The first sign in the events that the provider took the node (a notice or `preempted`)."""
    for e in events:
        if e.kind == "preempted" or (e.kind == "notice" and e.reason != "rebalance_recommendation"):
            return e
        if e.kind == "stop" and e.reason == "provider":  # the provider stopped it, naming no cause
            return e
    return None


def node_status(
    node: str,
    events: Iterable[Event],
    *,
    run_done: bool,
    state: NodeState | None = None,
    refusals: Iterable[Refusal] = (),
    now: datetime | None = None,
    heartbeat_s: float = 30.0,
    group: bool = False,
) -> NodeStatus:
    """The node's status from the record, and from the provider's `state` when given.

    Without `state` (the report) a node whose last allocation has no stop is `preempted` when the
    record shows a notice or a `preempted` event after its start, or silence for longer than
    LOST_AFTER_HEARTBEATS heartbeats before `now`; else `serving`.
    """
    evs = node_events(events, node, group=group)
    starts = [e for e in evs if e.kind == "start"]
    last_start = starts[-1] if starts else None
    since_start = [e for e in evs if last_start is None or e.time >= last_start.time]
    # a `stop` the provider's own events show (spoteval/events), naming no cause, is the provider
    # taking the node, not a person or a rule: it is restarted like a preemption
    stops = [e for e in since_start if e.kind == "stop" and e.reason != "provider"]
    stop = stops[-1] if stops else None
    alive = state is not None and state.status in ("running", "pending")

    def make(
        status: str, reason: str | None, since: datetime | None, detail: str, retry: bool = True
    ) -> NodeStatus:
        last_seen = evs[-1].time if evs else None
        return NodeStatus(
            node,
            status,
            reason,
            since,
            detail,
            state,
            retry,
            last_seen=last_seen,
            stopped_itself=stop is not None,
        )

    if run_done:
        done_at = stop.time if stop is not None and stop.reason == "done" else None
        return make(
            DONE, None, done_at, "every episode has its result" + ("; still running" if alive else ""), False
        )
    if stop is not None and (stop.reason or "").startswith("stop_rule:"):
        return make(
            STOPPED_BY_RULE,
            stop.reason,
            stop.time,
            "a stop rule stopped it" + ("; still running" if alive else ""),
            False,
        )
    if stop is not None:
        return make(STOPPED, stop.reason, stop.time, f"stopped ({stop.reason}); nothing restarts it", False)
    if state is not None and state.status == "terminated":
        return make(
            STOPPED, "terminated", None, f"the provider says {state.raw}: it cannot be started again", False
        )
    never_started = last_start is None and not any(e.kind == "preempted" for e in evs)
    if state is not None and state.running and never_started:
        return make(
            UNRECORDED,
            None,
            None,
            f"the provider says {state.raw}, but the record has no start of it: spot-eval did not start "
            "it (or its agent has not written yet); left alone",
            False,
        )
    if state is not None and state.running:
        return make(SERVING, None, last_start.time if last_start else None, "running")
    if state is not None and state.status == "pending":
        return make(STARTING, None, None, f"the provider says {state.raw}")
    if state is not None and state.status == "unknown":
        return make(UNKNOWN, state.raw, None, f"the provider says {state.raw}")
    if never_started:
        # (a node the provider took while it booted, before its agent wrote a start, has the
        # provider's `preempted` event: it was started, and is restarted like any other)
        if state is None:
            return make(UNKNOWN, None, None, "no start in the record")
        return make(STOPPED, "never started", None, "no start in the record: nothing to restart", False)
    if not since_start:
        return make(UNKNOWN, None, None, "nothing in the record")
    taken = _taken(since_start)
    last = since_start[-1]
    if state is None and taken is None:
        silent = (now - last.time).total_seconds() if now is not None else 0.0
        if silent <= LOST_AFTER_HEARTBEATS * heartbeat_s + 60:
            return make(SERVING, None, last_start.time if last_start else None, "the record shows it alive")
    return _taken_status(make, node, taken, last, refusals)


def _taken_status(
    make: Callable[..., NodeStatus],
    node: str,
    taken: Event | None,
    last: Event,
    refusals: Iterable[Refusal],
) -> NodeStatus:
    """A node the provider took (or that went silent): preempted, or stopped by the grant's refusal."""
    evidence = f"{taken.kind}:{taken.reason}" if taken is not None else "lost"
    since = taken.time if taken is not None else last.time
    later = [r for r in refusals if record_node(r.node) == record_node(node) and r.time >= since]
    if later:
        refusal = max(later, key=lambda r: r.time)
        status = make(
            STOPPED_BY_RULE, refusal.reason, refusal.time, f"the grant refuses a start: {refusal.message}"
        )
    else:
        status = make(PREEMPTED, evidence, since, f"taken by the provider ({evidence}); work remains")
    return replace(status, taken_at=since, evidence=evidence)
