"""The operator loop: per node, read its state and the record, decide, act, record; then wait.

    op = Operator(outputs, planes, grant, store)
    op.once()               # one pass over every node, then the lease let go (what `--once` does)
    op.run()                # passes every `timing.interval_s` until every node is done or stopped
    op.status()             # read-only: the status of each node; never starts or stops anything

With a `lease` (spoteval.operate.lease) every pass first takes or keeps the run's operator lease: a
pass that finds another run holding it only reads (`check_all` returns no lines and says so once), and
every start or stop is preceded by a check that the lease is still ours. `run` and `once` let the
lease go when they end: `finished` when the run is done and every node settled, else `released`.

Clocks and sleeps are injected (`clock`, `sleep`) so tests run without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from spoteval.clouds import CapacityError, ControlPlane, ControlPlaneError, NodeState, Price, StackOutputs
from spoteval.grant import Grant
from spoteval.node_status import (
    DONE,
    STOPPED,
    STOPPED_BY_RULE,
    UNKNOWN,
    NodeStatus,
    node_events,
    node_status,
)
from spoteval.operate import deadline
from spoteval.operate.decide import READ_PRICE, REFUSE, START, STOP, Action, NodeView, Timing, decide
from spoteval.operate.journal import Journal, Note, RunView, latest, read_run
from spoteval.operate.lease import FINISHED, HELD, OperatorLease, Standing
from spoteval.placement.live import Advice
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
        lease: OperatorLease | None = None,
        watch: deadline.DeadlineWatch | None = None,
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
        self.lease = lease
        self.standing: Standing | None = None  # the lease as the latest pass found it
        self.watch = watch  # the deadline rule, when the stack's workload has a deadline
        self.advice: Advice | None = None  # its answer at the last check

    # --- the lease --------------------------------------------------------------------------------

    @property
    def reading(self) -> bool:
        """Another run holds the lease (or the run is finished): this one only reads."""
        return self.standing is not None and self.standing.kind != HELD

    def _take_lease(self) -> bool:
        """Take or keep the lease before a pass. False: another run holds it, or the run is
        finished; the line saying so is said when that changes, not on every pass."""
        if self.lease is None:
            return True
        before = self.standing
        standing = self.lease.take()
        self.standing = standing
        if standing.kind == HELD:
            # said when a reader takes over (the holder let go or fell silent), or a first take
            # ends a silent holder's turn; the caller says what it found before the first pass
            if (before is not None and before.kind != HELD) or (before is None and standing.took_over):
                self.say(standing.line())
            return True
        same = (
            before is not None
            and before.kind == standing.kind
            and (before.latest.holder if before.latest else None)
            == (standing.latest.holder if standing.latest else None)
        )
        if not same:
            self.say(standing.line())
        return False

    def _may_act(self) -> bool:
        return self.lease is None or self.lease.confirm()

    def _why_not(self) -> str:
        lost = self.lease.lost if self.lease is not None else None
        if lost is not None:
            who = lost.latest.holder if lost.latest is not None else "another operator"
            return f"{who} took the operator lease"
        return "the operator lease could not be renewed in time (the store did not answer)"

    def let_go(self, lines: list[Line]) -> None:
        """End this run's turn with the lease: `finished` when every node's line says the run is done
        and nothing is left to do for it, else `released` (the next run takes it at once)."""
        if self.lease is None:
            return
        finished = bool(lines) and all(line.status.status == DONE and self._settled(line) for line in lines)
        self.lease.release(finished=finished)

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

    def deadline_advice(self, statuses: list[NodeStatus]) -> Advice | None:
        """The deadline rule's answer now, for `statuses` (of `status()`). Reads only."""
        if self.watch is None:
            return None
        return deadline.check(
            self.watch,
            self.read(),
            statuses,
            market=self.outputs.market,
            now=self.clock(),
            check_hours=self.timing.interval_s / 3600.0,
        )

    def deadline_report(self, statuses: list[NodeStatus]) -> tuple[dict[str, Any] | None, list[str]]:
        """What `status` says of the deadline: the rule's answer as JSON (with the command) and as
        its line; (None, []) without a deadline rule or once the run is done. Reads only."""
        advice = self.deadline_advice(statuses)
        if advice is None or self.watch is None:
            return None, []
        command = self.watch.command(advice)
        return {**advice.to_json(), "command": command}, [advice.text(command)]

    def _check_deadline(self, run: RunView, lines: list[Line]) -> None:
        """The deadline rule after a check: said while it asks for a switch, recorded once."""
        if self.watch is None:
            return
        now = self.clock()
        self.advice = deadline.check(
            self.watch,
            run,
            [line.status for line in lines],
            market=self.outputs.market,
            now=now,
            check_hours=self.timing.interval_s / 3600.0,
        )
        if self.advice is None or not self.advice.fires:
            return
        try:
            if self._may_act():  # the holder of the operator lease writes the record
                deadline.record_once(self.journal, run, self.watch, self.advice, now)
        except StoreError as exc:
            self.say(f"deadline: cannot write the journal: {exc}")
        self.say(self.advice.text(self.watch.command(self.advice)))

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
        if action.kind in (START, STOP) and not self._may_act():
            return Line(node, status, "reading", f"not acting ({action.kind}): {self._why_not()}")
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
        try:
            if not self._take_lease():
                return lines
            for node, plane in self.planes.items():  # the states first, then the record (see `check`)
                try:
                    states[node] = plane.state()
                except Exception as exc:  # reported on that node's line below
                    states[node] = exc
            run = self.read()
        except StoreError as exc:
            unknown = NodeStatus("", UNKNOWN, None, None, "the run record cannot be read")
            for node in self.planes:
                lines.append(Line(node, replace(unknown, node=node), "error", f"the run record: {exc}"))
                self.say(lines[-1].text())
            return lines
        for node in self.planes:
            if self.lease is not None:
                self.lease.tick()
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
        self._check_deadline(run, lines)
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

    def once(self) -> list[Line]:
        """One pass over every node, then the lease let go (`--once`)."""
        lines: list[Line] = []
        try:
            lines = self.check_all()
        finally:
            self.let_go(lines)
        return lines

    def run(self, *, max_passes: int | None = None) -> list[Line]:
        """Check every node every `timing.interval_s` until each is done or stopped for good. While
        another run holds the lease this one only reads, and takes the lease over when that run
        lets it go or falls silent; a finished run ends it at once."""
        passes = 0
        lines: list[Line] = []
        try:
            while True:
                lines = self.check_all()
                passes += 1
                last = max_passes is not None and passes >= max_passes
                if self.reading:
                    if last or (self.standing is not None and self.standing.kind == FINISHED):
                        return lines
                elif last or all(self._settled(line) for line in lines):
                    self.let_go(lines)
                    return lines
                self.sleep(self.timing.interval_s)
        finally:
            if self.lease is not None:
                self.lease.release()  # interrupted or failed: the next run takes the lease at once


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
