"""The operator's decision for one node, as a pure function: `decide(view, grant, run) -> Action`.

The loop (spoteval.operate.loop) reads the node's state and the record, asks, acts, and asks again
when the answer is `read_price` (a price is read just before every start, and where the provider's
engine restarts the node, on every check while it runs under a price cap). Nothing here reads a
clock, the store or a provider.

Order of the rules:

1. The run is done: a node still running is stopped (`done`) once its agent recorded its stop, or
   after `done_grace_s` without a word from it; else nothing.
2. A stop rule stopped the node, but it runs: stopped again (its rule); stopped by a person or a
   measurement, never started, or gone: nothing (only a person starts it).
3. The node holds capacity: stopped when the budget is spent (`stop_rule:budget`), its agent served
   and has written nothing for `idle_minutes` (`stop_rule:idle`: the agent is gone; on Azure and
   wherever no provider-side rule watches the agent, this is the idle stop), the run's node time
   (a pool's: its wall time since its first start) reached `max_runtime_hours`
   (`stop_rule:max_runtime`), or, where the provider's engine
   restarted it, the price now is above the cap (`stop_rule:price_cap`); else nothing.
4. The node was taken and work remains (for a pool whose engine does not restore its members, also
   when it serves with fewer members than the stack's size): where the provider's engine restarts
   it (an AWS persistent spot request, an Auto Scaling group, a Kubernetes controller) nothing but
   watching; before the capacity backoff has run out, nothing; else the grant is checked (region,
   instance type, max runtime, then the price now against the cap and the budget left for one more
   check interval) and the node is started (`restart_after_preemption`), or the start is refused
   with the grant's reason and a hint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from spoteval.billing import is_pool, runtime_hours
from spoteval.clouds import Price
from spoteval.grant import Grant, GrantError, Refusal
from spoteval.node_status import (
    DONE,
    PREEMPTED,
    SERVING,
    STARTING,
    STOPPED,
    STOPPED_BY_RULE,
    NodeStatus,
    node_events,
)
from spoteval.operate.journal import RunView

WAIT: Final = "wait"
READ_PRICE: Final = "read_price"
START: Final = "start"
STOP: Final = "stop"
REFUSE: Final = "refuse"

#: How to widen the grant, per refusal reason (the stack's `spot-eval:grant` block).
HINTS: Final = {
    "stop_rule:price_cap": "raise spot-eval:grant.price_cap in the stack file, or wait for the price to fall "
    "(the operator keeps checking)",
    "stop_rule:budget": "raise spot-eval:grant.budget in the stack file",
    "stop_rule:max_runtime": "raise spot-eval:grant.max_runtime_hours in the stack file",
    "grant:regions": "add the stack's region to spot-eval:grant.regions",
    "grant:instance_types": "add the stack's instance type to spot-eval:grant.instance_types",
}


@dataclass(frozen=True)
class Timing:
    """How often the operator checks and how long it backs off after a refused start."""

    interval_s: float = 60.0
    backoff_first_s: float = 60.0
    backoff_max_s: float = 900.0
    stop_timeout_s: float = 900.0
    #: A running node of a finished run is stopped once its agent recorded its stop, or after this
    #: long without a word from it (an agent left idle, a node that did not power off).
    done_grace_s: float = 120.0

    @property
    def start_hours(self) -> float:
        """The most one start can bill before the operator's next check can stop the node."""
        return (self.interval_s + self.stop_timeout_s) / 3600.0

    def backoff_s(self, failures: int) -> float:
        """The wait after `failures` refused starts in a row: doubling from the first, capped."""
        if failures <= 0:
            return 0.0
        return float(min(self.backoff_max_s, self.backoff_first_s * 2 ** min(failures - 1, 30)))


@dataclass(frozen=True)
class NodeView:
    """One node as the loop saw it in this check."""

    status: NodeStatus
    region: str
    instance_type: str
    engine_restarts: bool  # the provider's engine brings this node back (it must not be started)
    engine: bool = False  # the provider has such an engine (AWS persistent requests, Kubernetes)
    can_stay_stopped: bool = True
    failures: int = 0  # refused or failed starts since the node was taken
    last_failure: datetime | None = None
    missing: int = 0  # a pool's members below the stack's size (the group serves with fewer)


@dataclass(frozen=True)
class Action:
    kind: str  # WAIT, READ_PRICE, START, STOP, REFUSE
    reason: str | None  # the record's reason (start, stop) or the refusal's
    message: str
    price: Price | None = None
    hint: str | None = None
    next_try: datetime | None = None


def _wait(message: str, next_try: datetime | None = None) -> Action:
    return Action(WAIT, None, message, next_try=next_try)


def _refuse(exc: GrantError, price: Price | None) -> Action:
    reason = exc.stop_reason if isinstance(exc, Refusal) else f"grant:{exc.key.split('.')[-1]}"
    return Action(REFUSE, reason, str(exc), price, HINTS.get(reason))


def _runtime_hours(run: RunView, now: datetime, *, running: bool) -> float:
    return runtime_hours(run.events, now, running=running)


def _runtime_message(run: RunView, hours: float, limit: float) -> str:
    what = "the pool's wall time since its first start" if is_pool(run.events) else "the run's node time"
    return f"{what} {hours:.3f} h reached max_runtime_hours {limit:g}"


def _agent_silent_s(view: NodeView, run: RunView, now: datetime) -> float | None:
    """Seconds since the agent of a running node last wrote anything, once its allocation served
    (a `ready` after its last `start`: loading the model may take longer than the idle rule, and
    writes nothing); None before that, or when the node is not running. The agent writes a
    heartbeat every `heartbeat_s` while it runs, so a long silence means it is gone."""
    status = view.status
    if not status.running or status.last_seen is None:
        return None
    events = node_events(run.events, status.node)
    starts = [i for i, e in enumerate(events) if e.kind == "start"]
    if not starts or not any(e.kind == "ready" for e in events[starts[-1] :]):
        return None
    return (now - status.last_seen).total_seconds()


def _holding(view: NodeView, grant: Grant, run: RunView, now: datetime, price: Price | None) -> Action:
    try:
        left = grant.budget_left(run.events, now=now, fallback_price=price.per_hour if price else None)
    except Refusal:
        left = None  # hours without a price: the budget cannot fire (as the agent's rule)
    if left is not None and left <= 0:
        return Action(
            STOP, "stop_rule:budget", f"the budget {grant.budget:g} is spent ({left:.4f} left)", price
        )
    silent = _agent_silent_s(view, run, now)
    if grant.idle_minutes is not None and silent is not None and silent >= grant.idle_minutes * 60:
        return Action(
            STOP,
            "stop_rule:idle",
            f"no word from its agent for {silent / 60:.1f} min since it served (idle_minutes "
            f"{grant.idle_minutes:g}): the agent is gone and the node holds a GPU",
            price,
        )
    hours = _runtime_hours(run, now, running=True)
    if grant.max_runtime_hours is not None and hours >= grant.max_runtime_hours:
        message = _runtime_message(run, hours, grant.max_runtime_hours)
        return Action(STOP, "stop_rule:max_runtime", message, price)
    if view.engine and grant.price_cap is not None:
        if price is None:
            return Action(READ_PRICE, None, "the provider's engine started it: checking the price cap")
        try:
            grant.check_price_now(price.per_hour, price.currency)
        except Refusal as exc:
            return Action(STOP, exc.stop_reason, str(exc), price, HINTS.get(exc.stop_reason))
    return _wait(view.status.detail)


def decide(
    view: NodeView, grant: Grant, run: RunView, *, now: datetime, timing: Timing, price: Price | None = None
) -> Action:
    """What to do with one node now (see the module docstring)."""
    status = view.status
    running = status.running
    if status.status == DONE:
        if not running or not view.can_stay_stopped:
            return _wait("the run is done")
        silent = (now - status.last_seen).total_seconds() if status.last_seen else math.inf
        if status.stopped_itself or silent >= timing.done_grace_s:
            return Action(STOP, "done", "the run is done", price)
        return _wait(f"the run is done; its agent is finishing (silent {silent:.0f} s)")
    if status.status == STOPPED_BY_RULE and not status.retry:
        if running and view.can_stay_stopped:
            return Action(STOP, status.reason, f"{status.reason} stopped it, but it runs", price)
        return _wait(status.detail)
    if status.status == STOPPED:
        return _wait(status.detail)
    restoring = status.status == SERVING and view.missing > 0 and not view.engine_restarts
    if status.status in (SERVING, STARTING) and not restoring:
        return _holding(view, grant, run, now, price)
    if restoring:
        held = _holding(view, grant, run, now, price)
        if held.kind != WAIT:
            return held
    if status.status not in (PREEMPTED, STOPPED_BY_RULE) and not restoring:
        return _wait(status.detail)
    if view.engine_restarts:
        return _wait("taken; the provider's engine starts it again when capacity returns")
    if view.failures and view.last_failure is not None:
        next_try = view.last_failure + timedelta(seconds=timing.backoff_s(view.failures))
        if now < next_try:
            left = (next_try - now).total_seconds()
            return _wait(f"waiting for capacity: try {view.failures + 1} in {left:.0f} s", next_try)
    try:
        grant.check_region(view.region, "regions")
        grant.check_instance_type(view.instance_type, "instance_types")
    except GrantError as exc:
        return _refuse(exc, price)
    hours = _runtime_hours(run, now, running=False)  # the node's billed time ended with its record
    if grant.max_runtime_hours is not None and hours >= grant.max_runtime_hours:
        message = _runtime_message(run, hours, grant.max_runtime_hours)
        return _refuse(Refusal("max_runtime_hours", message, "stop_rule:max_runtime"), price)
    if price is None:
        return Action(READ_PRICE, None, "reading the price before a start")
    try:
        grant.check_price_now(price.per_hour, price.currency)
        grant.check_budget(run.events, next_hours=timing.start_hours, price_per_hour=price.per_hour)
    except Refusal as exc:
        return _refuse(exc, price)
    if restoring:
        message = f"{view.missing} of its members taken and work remains: restoring them"
        return Action(START, "restart_after_preemption", message, price)
    return Action(START, "restart_after_preemption", "taken and work remains: starting it", price)
