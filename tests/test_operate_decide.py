"""The operator's pure parts: the node status every reader shares, and decide(view, grant, run)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from spoteval.clouds import NodeState, Price
from spoteval.grant import Grant
from spoteval.node_status import (
    PREEMPTED,
    SERVING,
    STOPPED,
    STOPPED_BY_RULE,
    Refusal,
    node_status,
    record_node,
)
from spoteval.operate.decide import READ_PRICE, REFUSE, START, STOP, WAIT, NodeView, Timing, decide
from spoteval.operate.journal import RunView
from spoteval.record import Event
from tests.operate_kit import T0

NOW = T0 + timedelta(hours=1)
TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=240)
STOPPED_STATE = NodeState("stopped", "TERMINATED")
RUNNING_STATE = NodeState("running", "RUNNING")


def ev(
    minutes: float, kind: str, reason: str | None = None, price: float | None = 1.0, node: str = "n1"
) -> Event:
    return Event(
        time=T0 + timedelta(minutes=minutes),
        run_id="r1",
        node=node,
        kind=kind,
        reason=reason,
        price_per_hour=price,
        currency="USD" if price is not None else None,
        price_source="api" if price is not None else "unknown",
    )


TAKEN = (ev(0, "start", "initial"), ev(10, "heartbeat"), ev(20, "notice", "preempted"))


def run(*events: Event, missing: int = 2, refusals: tuple[Any, ...] = ()) -> RunView:
    return RunView(tuple(events), tuple(refusals), 4, missing)


def view(events: tuple[Event, ...], state: NodeState, **kw: Any) -> NodeView:
    status = node_status("n1", events, run_done=False, state=state, now=NOW)
    fields: dict[str, Any] = {
        "region": "us-central1",
        "instance_type": "g2-standard-8",
        "engine_restarts": False,
    }
    fields.update(kw)
    return NodeView(status=status, **fields)


def act(
    v: NodeView, grant: Grant, r: RunView, price: Price | None = None, now: datetime = NOW
) -> tuple[str, str | None]:
    action = decide(v, grant, r, now=now, timing=TIMING, price=price)
    return action.kind, action.reason


def test_a_taken_node_needs_the_price_before_it_starts() -> None:
    v = view(TAKEN, STOPPED_STATE)
    assert v.status.status == PREEMPTED
    assert act(v, Grant(price_cap=2.0), run(*TAKEN)) == (READ_PRICE, None)
    assert act(v, Grant(price_cap=2.0), run(*TAKEN), Price(1.5, "USD", "api")) == (
        START,
        "restart_after_preemption",
    )


def test_a_price_unknown_under_a_cap_or_a_budget_is_a_refusal() -> None:
    v = view(TAKEN, STOPPED_STATE)
    unknown = Price(None, "USD", "unknown")
    assert act(v, Grant(price_cap=2.0), run(*TAKEN), unknown) == (REFUSE, "stop_rule:price_cap")
    assert act(v, Grant(budget=10.0), run(*TAKEN), unknown) == (REFUSE, "stop_rule:budget")
    assert act(v, Grant(), run(*TAKEN), unknown) == (START, "restart_after_preemption")


def test_the_budget_must_cover_one_more_check_interval_and_stop() -> None:
    v = view(TAKEN, STOPPED_STATE)
    spent = 20 / 60  # 20 min at 1.0 per hour
    price = Price(1.0, "USD", "api")
    need = TIMING.start_hours  # (60 s + 240 s) / 3600 at 1.0 per hour
    assert act(v, Grant(budget=spent + need + 0.001), run(*TAKEN), price) == (
        START,
        "restart_after_preemption",
    )
    assert act(v, Grant(budget=spent + need - 0.001), run(*TAKEN), price) == (REFUSE, "stop_rule:budget")


def test_region_instance_type_and_max_runtime_refusals_name_the_grant_key() -> None:
    v = view(TAKEN, STOPPED_STATE)
    assert act(v, Grant(regions=("europe-west4",)), run(*TAKEN)) == (REFUSE, "grant:regions")
    assert act(v, Grant(instance_types=("a2-highgpu-1g",)), run(*TAKEN)) == (REFUSE, "grant:instance_types")
    action = decide(v, Grant(max_runtime_hours=0.25), run(*TAKEN), now=NOW, timing=TIMING)
    assert (action.kind, action.reason) == (REFUSE, "stop_rule:max_runtime")
    assert action.hint == "raise spot-eval:grant.max_runtime_hours in the stack file"


def test_where_the_providers_engine_restarts_the_node_the_operator_only_watches() -> None:
    v = view(
        TAKEN, NodeState("stopped", "stopped", {"provider_restarts": True}), engine_restarts=True, engine=True
    )
    assert act(v, Grant(price_cap=0.1), run(*TAKEN)) == (WAIT, None)
    back = (*TAKEN, ev(40, "start", "restart_after_preemption"))
    serving = view(back, RUNNING_STATE, engine=True)
    assert serving.status.status == SERVING
    assert act(serving, Grant(price_cap=0.5), run(*back)) == (READ_PRICE, None)
    assert act(serving, Grant(price_cap=0.5), run(*back), Price(0.4, "USD", "api")) == (WAIT, None)
    assert act(serving, Grant(price_cap=0.5), run(*back), Price(0.6, "USD", "api")) == (
        STOP,
        "stop_rule:price_cap",
    )


def test_a_serving_node_is_stopped_when_the_budget_is_spent_or_the_run_done() -> None:
    events = (ev(0, "start", "initial"), ev(50, "heartbeat"))
    v = view(events, RUNNING_STATE)
    assert act(v, Grant(budget=0.5), run(*events)) == (STOP, "stop_rule:budget")  # 1 h at 1.0 by NOW
    assert act(v, Grant(budget=5.0), run(*events)) == (WAIT, None)
    assert act(v, Grant(max_runtime_hours=0.9), run(*events)) == (STOP, "stop_rule:max_runtime")
    done = NodeView(
        status=node_status("n1", events, run_done=True, state=RUNNING_STATE),
        region="r",
        instance_type="t",
        engine_restarts=False,
    )
    assert act(done, Grant(), run(*events, missing=0)) == (STOP, "done")


def test_a_stop_rule_or_a_persons_stop_is_final() -> None:
    idle = (ev(0, "start", "initial"), ev(30, "stop", "stop_rule:idle"))
    status = node_status("n1", idle, run_done=False, state=STOPPED_STATE)
    assert (status.status, status.reason, status.retry) == (STOPPED_BY_RULE, "stop_rule:idle", False)
    assert act(view(idle, STOPPED_STATE), Grant(), run(*idle)) == (WAIT, None)
    assert act(view(idle, RUNNING_STATE), Grant(), run(*idle)) == (STOP, "stop_rule:idle")
    user = (ev(0, "start", "initial"), ev(30, "stop", "user"))
    assert act(view(user, STOPPED_STATE), Grant(), run(*user)) == (WAIT, None)
    never = view((), STOPPED_STATE)
    assert (never.status.status, never.status.reason) == (STOPPED, "never started")
    assert act(never, Grant(), run()) == (WAIT, None)


def test_an_operator_refusal_is_retried_at_the_next_check() -> None:
    refused = Refusal(T0 + timedelta(minutes=25), "n1", "stop_rule:price_cap", "above the cap")
    status = node_status("n1", TAKEN, run_done=False, state=STOPPED_STATE, refusals=[refused])
    assert (status.status, status.reason, status.retry) == (STOPPED_BY_RULE, "stop_rule:price_cap", True)
    v = NodeView(status=status, region="r", instance_type="t", engine_restarts=False)
    assert act(v, Grant(price_cap=2.0), run(*TAKEN), Price(1.0, "USD", "api")) == (
        START,
        "restart_after_preemption",
    )


def test_capacity_backoff_doubles_up_to_its_cap() -> None:
    assert [TIMING.backoff_s(n) for n in range(7)] == [0.0, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0]
    v = view(TAKEN, STOPPED_STATE, failures=2, last_failure=NOW - timedelta(seconds=100))
    assert act(v, Grant(), run(*TAKEN)) == (WAIT, None)
    assert act(v, Grant(), run(*TAKEN), now=NOW + timedelta(seconds=20)) == (READ_PRICE, None)


@pytest.mark.parametrize(
    ("last_minutes", "status", "reason"),
    [(58, SERVING, None), (50, PREEMPTED, "lost")],  # silent for 2 min vs 10 min at 30 s heartbeats
)
def test_without_the_providers_state_silence_means_lost(
    last_minutes: float, status: str, reason: str | None
) -> None:
    events = (ev(0, "start", "initial"), ev(last_minutes, "heartbeat"))
    got = node_status("n1", events, run_done=False, now=NOW)
    assert (got.status, got.reason) == (status, reason)


def test_the_records_node_name_is_the_last_segment_of_a_resource_path() -> None:
    assert record_node("projects/p/zones/z/instances/gpu-1") == "gpu-1"
    assert record_node("i-0abc") == "i-0abc"
    full = tuple(
        ev(m, k, r, node="gpu-1") for m, k, r in ((0, "start", "initial"), (20, "notice", "preempted"))
    )
    assert (
        node_status("projects/p/zones/z/instances/gpu-1", full, run_done=False, state=STOPPED_STATE).status
        == PREEMPTED
    )


def test_a_finished_runs_node_is_stopped_once_its_agent_stopped_or_fell_silent() -> None:
    events = (ev(0, "start", "initial"), ev(59, "heartbeat"))
    grace = Timing(done_grace_s=120)

    def done_view(evs: tuple[Event, ...]) -> NodeView:
        status = node_status("n1", evs, run_done=True, state=RUNNING_STATE)
        return NodeView(status=status, region="r", instance_type="t", engine_restarts=False)

    finishing = decide(done_view(events), Grant(), run(*events, missing=0), now=NOW, timing=grace)
    assert (finishing.kind, finishing.message) == (
        WAIT,
        "the run is done; its agent is finishing (silent 60 s)",
    )
    silent = decide(
        done_view(events), Grant(), run(*events, missing=0), now=NOW + timedelta(seconds=60), timing=grace
    )
    assert (silent.kind, silent.reason) == (STOP, "done")
    stopped = (*events, ev(59.5, "stop", "done"))
    assert act(done_view(stopped), Grant(), run(*stopped, missing=0)) == (STOP, "done")


def test_a_node_taken_while_it_booted_is_restarted_like_any_other() -> None:
    booting = (ev(5, "preempted", "provider", price=None),)  # the provider's event; no agent start yet
    v = view(booting, STOPPED_STATE)
    assert (v.status.status, v.status.reason) == (PREEMPTED, "preempted:provider")
    assert act(v, Grant(), run(*booting), Price(1.0, "USD", "api")) == (START, "restart_after_preemption")


def test_a_stop_the_providers_own_events_show_is_restarted_like_a_preemption() -> None:
    # `scripts.report --provider-events` records a provider's stop that names no interruption as
    # `stop`/`provider`: the provider took the node, no person or rule did
    stopped = (ev(0, "start", "initial"), ev(10, "heartbeat"), ev(20, "stop", "provider", price=None))
    v = view(stopped, STOPPED_STATE)
    assert (v.status.status, v.status.reason, v.status.evidence) == (
        PREEMPTED,
        "stop:provider",
        "stop:provider",
    )
    assert act(v, Grant(), run(*stopped), Price(1.0, "USD", "api")) == (START, "restart_after_preemption")
    # a person's stop after it stays final
    user = (*stopped, ev(30, "stop", "user"))
    assert act(view(user, STOPPED_STATE), Grant(), run(*user)) == (WAIT, None)
