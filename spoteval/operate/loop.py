"""The operator loop: per node, read its state and the record, decide, act, record; then wait.

    op = Operator(outputs, planes, grant, store)
    op.check_all()          # one pass over every node (what `--once` does)
    op.run()                # passes every `timing.interval_s` until every node is done or stopped
    op.status()             # read-only: the status of each node; never starts or stops anything

Clocks and sleeps are injected (`clock`, `sleep`) so tests run without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from spoteval.clouds import CapacityError, ControlPlane, ControlPlaneError, NodeState, Price, StackOutputs
from spoteval.grant import Grant
from spoteval.operate.decide import READ_PRICE, REFUSE, START, STOP, Action, NodeView, Timing, decide
from spoteval.operate.journal import Journal, Note, RunView, latest, read_run
from spoteval.operate.status import (
    DONE,
    STOPPED,
    STOPPED_BY_RULE,
    UNKNOWN,
    NodeStatus,
    node_events,
    node_status,
)
from spoteval.record import RunLayout, format_time, utc_now
from spoteval.store import Store, StoreError

#: Statuses after which the loop has nothing left to do for a node.
SETTLED: Final = frozenset({DONE, STOPPED})


@dataclass(frozen=True)
class Line:
    """One node's progress line: its status and what the operator did about it."""

    node: str
    status: NodeStatus
    action: str  # what was done: "watching", "started", "stopped", "refused", "capacity", "error"
    message: str

    def text(self) -> str:
        return f"{self.node}: {self.status.label}; {self.action}: {self.message}"


def engine_restarts(plane: ControlPlane, state: NodeState) -> bool:
    """Whether the provider's own engine brings this node back (then the operator only watches)."""
    return plane.restarts_itself and bool(state.details.get("provider_restarts", True))


class Operator:
    def __init__(
        self,
        outputs: StackOutputs,
        planes: Mapping[str, ControlPlane],
        grant: Grant,
        store: Store,
        *,
        timing: Timing | None = None,
        start_timeout_s: float = 1800.0,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.outputs = outputs
        self.planes = dict(planes)
        self.grant = grant
        self.store = store
        self.timing = timing or Timing()
        self.start_timeout_s = start_timeout_s
        self.clock = clock
        self.sleep = sleep
        self.say = say
        self.layout = RunLayout(outputs.run_id)
        self.journal = Journal(store, outputs)
        self._cache: dict[str, object] = {}  # record objects already read (they never change)

    # --- reading ----------------------------------------------------------------------------------

    def read(self) -> RunView:
        return read_run(self.store, self.layout, self._cache)

    def _group(self, node: str) -> bool:
        """Whether this node id is a pool's group (its members are the run's other node ids)."""
        return bool(getattr(self.planes[node], "is_group", False))

    def _status(self, node: str, run: RunView, state: NodeState | None) -> NodeStatus:
        return node_status(
            node,
            run.events,
            run_done=run.done,
            state=state,
            refusals=run.refusals(),
            now=self.clock(),
            group=self._group(node),
        )

    def status(self) -> list[NodeStatus]:
        """Each node's status from its provider state and the record. Reads only."""
        run = self.read()
        return [self._status(node, run, plane.state()) for node, plane in self.planes.items()]

    def _view(self, node: str, plane: ControlPlane, status: NodeStatus, run: RunView) -> NodeView:
        state = status.state or NodeState("unknown", "not read")
        events = node_events(run.events, node, group=self._group(node))
        starts = [e.time for e in events if e.kind == "start"]
        since = starts[-1] if starts else None
        missing = state.details.get("missing", 0)
        failures = run.notes_of(node, "capacity_error", since) + run.notes_of(node, "start_error", since)
        last = latest(failures)
        return NodeView(
            status=status,
            region=self.outputs.region,
            instance_type=self.outputs.instance_type,
            engine_restarts=engine_restarts(plane, state),
            engine=plane.restarts_itself,
            can_stay_stopped=plane.can_stay_stopped,
            failures=len(failures),
            last_failure=last.time if last else None,
            missing=missing if isinstance(missing, int) else 0,
        )

    # --- one node -----------------------------------------------------------------------------------

    def check(
        self, node: str, run: RunView | None = None, state: NodeState | Exception | None = None
    ) -> Line:
        """One check of one node: observe, decide, act, record. The node's state is read before the
        record (`run`, when given, was read after `state`): a node that wrote its `stop` and then
        ended is never seen ended without that stop."""
        plane = self.planes[node]
        if state is None:
            try:
                state = plane.state()
            except ControlPlaneError as exc:
                state = exc
        run = run if run is not None else self.read()
        if isinstance(state, ControlPlaneError):
            status = self._status(node, run, None)
            return Line(node, status, "error", f"cannot read the node: {state}")
        if isinstance(state, Exception):  # an SDK error no plane wrapped (check_all reports it)
            raise state
        status = self._status(node, run, state)
        view = self._view(node, plane, status, run)
        now = self.clock()
        action = decide(view, self.grant, run, now=now, timing=self.timing)
        if action.kind == READ_PRICE:
            try:
                price = plane.price_now()
            except ControlPlaneError as exc:
                return Line(node, status, "error", f"cannot read the price: {exc}")
            action = decide(view, self.grant, run, now=self.clock(), timing=self.timing, price=price)
        if action.kind == START:
            return self._start(node, plane, status, view, action)
        if action.kind == STOP:
            return self._stop(node, plane, status, run, action)
        if action.kind == REFUSE:
            return self._refuse(node, status, run, action)
        return Line(node, status, "watching", action.message)

    def _start(
        self, node: str, plane: ControlPlane, status: NodeStatus, view: NodeView, action: Action
    ) -> Line:
        requested = self.clock()
        before = _members(status.state)
        try:
            plane.start(self.start_timeout_s)
        except ControlPlaneError as exc:
            capacity = isinstance(exc, CapacityError)
            wait = self.timing.backoff_s(view.failures + 1)
            cleanup = self._leave_stopped(plane)
            self.journal.note(
                Note(
                    self.clock(),
                    node,
                    "capacity_error" if capacity else "start_error",
                    "capacity" if capacity else "error",
                    str(exc),
                    {"attempt": view.failures + 1, "next_try_s": wait, **cleanup},
                )
            )
            what = "no capacity" if capacity else "start failed"
            return Line(
                node, status, "capacity" if capacity else "error", f"{what}: {exc}; next try in {wait:.0f} s"
            )
        running = self.clock()
        waited = (running - status.taken_at).total_seconds() if status.taken_at else None
        price = action.price
        details = {
            "by": "operator",
            "requested": format_time(requested),
            "start_s": round((running - requested).total_seconds(), 3),
            "waited_s": None if waited is None else round(waited, 3),
            "capacity_errors": view.failures,
            "evidence": status.evidence,
            **({} if price is None else {"price": price.to_json()}),
        }
        # A pool's start is recorded for each member it brought: those are the nodes that bill (the
        # group itself is no node of the record).
        started = [node]
        if self._group(node):
            started = sorted(_members(self._state_after(plane)) - before)
            details["group"] = node
        for member in started:
            self.journal.event(
                running, member, "start", "restart_after_preemption", price=price, details=details
            )
        cost = (
            f"{price.per_hour:g} {price.currency}/h ({price.source})"
            if price and price.per_hour is not None
            else "price unknown"
        )
        members = f" ({len(started)} members)" if self._group(node) else ""
        return Line(node, status, "started", f"restart_after_preemption at {cost}{members}")

    def _state_after(self, plane: ControlPlane) -> NodeState | None:
        try:
            return plane.state()
        except ControlPlaneError:
            return None

    def _leave_stopped(self, plane: ControlPlane) -> dict[str, object]:
        """After a failed start, a node that is nonetheless up is stopped: no GPU bills while nothing runs."""
        try:
            state = plane.state()
            if state.status in ("running", "pending") and plane.can_stay_stopped:
                plane.stop(self.timing.stop_timeout_s)
                return {"stopped_after_failed_start": state.raw}
        except ControlPlaneError as exc:
            return {"cleanup_error": str(exc)}
        return {}

    def _stop(self, node: str, plane: ControlPlane, status: NodeStatus, run: RunView, action: Action) -> Line:
        reason = action.reason or "done"
        try:
            plane.stop(self.timing.stop_timeout_s)
        except ControlPlaneError as exc:
            return Line(node, status, "error", f"stopping it ({reason}) failed: {exc}")
        stopped = self.clock()
        details = {"by": "operator", "message": action.message}
        # a pool's stop ends each member that was running (the nodes that bill)
        nodes = sorted(_members(status.state)) if self._group(node) else [node]
        if self._group(node):
            details["group"] = node
        for member in nodes:
            events = node_events(run.events, member)
            if events and events[-1].kind == "stop":
                self.journal.note(Note(stopped, member, "stopped", reason, action.message))
            else:
                self.journal.event(stopped, member, "stop", reason, price=action.price, details=details)
        if not nodes:
            self.journal.note(Note(stopped, node, "stopped", reason, action.message))
        return Line(node, status, "stopped", f"{reason}: {action.message}")

    def _refuse(self, node: str, status: NodeStatus, run: RunView, action: Action) -> Line:
        reason = action.reason or "grant"
        already = status.status == STOPPED_BY_RULE and status.reason == reason
        if not already:
            self.journal.note(
                Note(
                    self.clock(),
                    node,
                    "refused",
                    reason,
                    action.message,
                    {
                        "hint": action.hint,
                        **({} if action.price is None else {"price": action.price.to_json()}),
                    },
                )
            )
        hint = f" ({action.hint})" if action.hint else ""
        return Line(node, status, "refused", f"{action.message}{hint}")

    # --- every node -----------------------------------------------------------------------------------

    def check_all(self) -> list[Line]:
        """One check of every node. A problem with one node (or the store) is that node's line: the
        loop goes on, so one bad answer never leaves the other nodes unwatched."""
        lines: list[Line] = []
        states: dict[str, NodeState | Exception] = {}
        for node, plane in self.planes.items():  # the states first, then the record (see `check`)
            try:
                states[node] = plane.state()
            except Exception as exc:  # reported on that node's line below
                states[node] = exc
        try:
            run = self.read()
        except StoreError as exc:
            unknown = NodeStatus("", UNKNOWN, None, None, "the run record cannot be read")
            for node in self.planes:
                lines.append(Line(node, replace(unknown, node=node), "error", f"the run record: {exc}"))
                self.say(lines[-1].text())
            return lines
        for node in self.planes:
            try:
                line = self.check(node, run, states[node])
            except StoreError as exc:
                line = Line(node, self._status(node, run, None), "error", f"the run record: {exc}")
            except Exception as exc:  # an SDK error no plane wrapped: report it, keep operating
                line = Line(
                    node, self._status(node, run, None), "error", f"unexpected {type(exc).__name__}: {exc}"
                )
            lines.append(line)
            self.say(line.text())
        return lines

    def _settled(self, line: Line) -> bool:
        """Nothing left to do for this node: done or stopped for good, and not left running; or the
        grant refuses its start for a reason this process cannot see change (all but the price)."""
        status = line.status
        if blocked(line):
            return True
        final = status.status in SETTLED or (status.status == STOPPED_BY_RULE and not status.retry)
        if not final or line.action not in ("watching", "stopped"):
            return False
        return line.action == "stopped" or not status.running or not self.planes[line.node].can_stay_stopped

    def run(self, *, max_passes: int | None = None) -> list[Line]:
        """Check every node every `timing.interval_s` until each is done or stopped for good."""
        passes = 0
        while True:
            lines = self.check_all()
            passes += 1
            settled = all(self._settled(line) for line in lines)
            if settled or (max_passes is not None and passes >= max_passes):
                return lines
            self.sleep(self.timing.interval_s)


def _members(state: NodeState | None) -> set[str]:
    """A pool group's running members, as its plane lists them (empty for a single node)."""
    members = state.details.get("members", ()) if state is not None else ()
    return {str(m) for m in members} if isinstance(members, tuple | list) else set()


def blocked(line: Line) -> bool:
    """The grant refuses this node's start for a reason only a wider grant lifts (budget, max
    runtime, region, instance type): waiting cannot help. A price above the cap may fall."""
    status = line.status
    return (
        line.action == "refused"
        and status.status == STOPPED_BY_RULE
        and status.retry
        and status.reason not in (None, "stop_rule:price_cap")
    )


__all__ = ["Line", "Operator", "Price", "blocked", "engine_restarts"]
