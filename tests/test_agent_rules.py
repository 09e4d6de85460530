"""Pure decisions of the agent: stop rules, start reasons, lost attempts, billed time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from spoteval.agent import history as hist
from spoteval.agent.config import StopRules
from spoteval.agent.rules import RunState, should_stop
from spoteval.record import Attempt, Event, format_time

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=timezone.utc)


def _state(**kw: Any) -> RunState:
    base: dict[str, Any] = {"remaining": 5, "running": 2, "uptime_s": 100.0, "cost": 1.0, "idle_s": 0.0}
    base.update(kw)
    return RunState(**base)


def test_no_work_left_is_done_before_any_rule() -> None:
    rules = StopRules(budget=0.5, max_runtime_s=10)
    stop = should_stop(_state(remaining=0, running=0), rules)
    assert stop is not None and stop.reason == "done"


def test_nothing_applies_while_work_runs_within_limits() -> None:
    assert should_stop(_state(), StopRules(budget=5, max_runtime_s=1000, idle_s=10)) is None


def test_budget_stops_when_spent_reaches_it() -> None:
    stop = should_stop(_state(cost=5.0), StopRules(budget=5.0))
    assert stop is not None and stop.reason == "stop_rule:budget"
    assert stop.details["spent"] == 5.0 and stop.details["remaining"] == 5


def test_budget_cannot_fire_without_a_price() -> None:
    assert should_stop(_state(cost=None, uptime_s=1e6), StopRules(budget=0.01)) is None


def test_max_runtime_counts_uptime_across_restarts() -> None:
    stop = should_stop(_state(uptime_s=3600.0), StopRules(max_runtime_s=3600))
    assert stop is not None and stop.reason == "stop_rule:max_runtime"


def test_idle_needs_nothing_running() -> None:
    rules = StopRules(idle_s=30)
    assert should_stop(_state(running=1, idle_s=100), rules) is None
    stop = should_stop(_state(running=0, idle_s=30), rules)
    assert stop is not None and stop.reason == "stop_rule:idle"


# --- the record's history -----------------------------------------------------------------------


def _ev(
    kind: str,
    reason: str | None,
    inc: str,
    t: float,
    node: str = "n1",
    price: float | None = 2.0,
    **details: Any,
) -> Event:
    return Event(
        time=T0 + timedelta(seconds=t),
        run_id="r1",
        node=node,
        kind=kind,
        reason=reason,
        price_per_hour=price,
        price_source="configured" if price is not None else "unknown",
        details={"incarnation": inc, **details} if inc else details,
    )


def _history(events: list[Event], attempts: dict[str, tuple[Attempt, ...]] | None = None) -> hist.History:
    return hist.History(
        events=tuple(events),
        incarnations=hist.group_incarnations(events),
        results=frozenset(),
        attempt_numbers={},
        attempts=attempts or {},
    )


NOW = T0 + timedelta(hours=1)


def test_first_start_is_initial() -> None:
    assert hist.start_reason(_history([]), "n1", NOW) == ("initial", {})


def test_start_after_a_stop_event_is_restart_after_stop() -> None:
    events = [
        _ev("start", "initial", "a", 0),
        _ev("notice", "rebalance_recommendation", "a", 5),
        _ev("stop", "done", "a", 9),
    ]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert reason == "restart_after_stop"
    assert details["previous"]["incarnation"] == "a"


def test_start_after_a_notice_is_restart_after_preemption() -> None:
    events = [_ev("start", "initial", "a", 0), _ev("notice", "sigterm", "a", 5)]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert reason == "restart_after_preemption"
    assert details["previous"]["evidence"] == "notice:sigterm"


def test_start_after_a_node_lost_without_notice_is_restart_after_preemption() -> None:
    events = [_ev("start", "initial", "a", 0), _ev("heartbeat", None, "a", 30)]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert reason == "restart_after_preemption"
    assert details["previous"]["evidence"] == "lost"


def test_a_preempted_event_written_from_outside_counts() -> None:
    events = [
        _ev("start", "initial", "a", 0),
        _ev("stop", "user", "a", 5),
        _ev("preempted", "provider", "", 6),
    ]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert (reason, details["previous"]["evidence"]) == ("restart_after_preemption", "preempted")


def test_a_stop_from_outside_makes_the_shutdown_sigterm_a_stop_not_a_preemption() -> None:
    events = [
        _ev("start", "initial", "a", 0),
        _ev("stop", "measurement", "", 4),  # written by the restart measurement, not by an agent
        _ev("notice", "sigterm", "a", 5),  # the OS shutdown that stop caused
    ]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert reason == "restart_after_stop"
    assert details["previous"]["stopped_by"] == "measurement"
    taken = [*events, _ev("preempted", "provider", "", 6)]
    assert hist.start_reason(_history(taken), "n1", NOW)[0] == "restart_after_preemption"


def test_this_nodes_previous_incarnation_decides_not_another_nodes() -> None:
    events = [
        _ev("start", "initial", "a", 0),
        _ev("stop", "done", "a", 10),
        _ev("start", "initial", "b", 1, node="n2"),
        _ev("heartbeat", None, "b", 20, node="n2"),
    ]
    assert hist.start_reason(_history(events), "n1", NOW)[0] == "restart_after_stop"


def test_a_new_node_joining_a_live_run_starts_initial() -> None:
    events = [
        _ev("start", "initial", "b", 0, node="n2", heartbeat_s=30),
        _ev("heartbeat", None, "b", 3590, node="n2"),
    ]
    reason, details = hist.start_reason(_history(events), "n1", NOW)
    assert reason == "initial" and details == {"joined_live_run": True}


def _attempt(episode: str, n: int, inc: str, dispatch: int, outcome: str = "completed") -> Attempt:
    return Attempt(
        episode_id=episode,
        outcome=outcome,
        attempt=n,
        node="n1",
        started=T0,
        ended=T0 + timedelta(seconds=1),
        output={"ok": True} if outcome == "completed" else None,
        details={"incarnation": inc, "dispatch": dispatch},
    )


def test_lost_attempts_are_in_flight_entries_no_attempt_accounts_for() -> None:
    t = format_time(T0 + timedelta(seconds=2))
    events = [
        _ev("start", "initial", "a", 0),
        _ev("heartbeat", None, "a", 2, in_flight=[["e1", 1, t], ["e2", 2, t]]),
        _ev("heartbeat", None, "a", 3, in_flight=[["e1", 1, t], ["e2", 2, t], ["e3", 3, t]]),
    ]
    history = _history(events, {"e1": (_attempt("e1", 1, "a", 1),), "e3": (_attempt("e3", 1, "other", 3),)})
    incs = hist.unresolved(history, "n1", NOW)
    assert [i.id for i in incs] == ["a"]
    lost = hist.lost_attempts(hist.lost_candidates(incs), history.attempts)
    assert [(x.episode_id, x.dispatch) for x in lost] == [("e2", 2), ("e3", 3)]
    assert lost[0].last_seen == T0 + timedelta(seconds=3) and lost[0].started == T0 + timedelta(seconds=2)


def test_incarnations_a_start_resolved_are_not_checked_again() -> None:
    t = format_time(T0)
    events = [
        _ev("start", "initial", "a", 0),
        _ev("heartbeat", None, "a", 2, in_flight=[["e1", 1, t]]),
        _ev("start", "restart_after_preemption", "b", 10, resolved=["a"]),
    ]
    history = _history(events)
    assert [i.id for i in hist.unresolved(history, "n1", NOW)] == ["b"]


def test_a_live_incarnation_of_another_node_is_not_lost() -> None:
    t = format_time(T0)
    events = [
        _ev("start", "initial", "b", 0, node="n2", heartbeat_s=30),
        _ev("heartbeat", None, "b", 3590, node="n2", in_flight=[["e1", 1, t]]),
    ]
    assert hist.unresolved(_history(events), "n1", NOW) == []
    assert [i.id for i in hist.unresolved(_history(events), "n1", NOW + timedelta(hours=1))] == ["b"]


def test_billed_time_counts_overlaps_on_one_node_once_and_adds_nodes() -> None:
    iv = hist.Interval
    t = [T0 + timedelta(seconds=s) for s in (0, 100, 50, 200, 0)]
    billed = hist.billed(
        [
            iv("n1", t[0], t[1], 3.6),  # 100 s
            iv("n1", t[2], t[3], 3.6),  # overlaps from 50 to 100: adds 100 s
            iv("n2", t[4], t[1], 7.2),  # another node: 100 s
        ]
    )
    assert billed.seconds == 300.0
    assert abs((billed.cost or 0) - (0.1 + 0.1 + 0.2)) < 1e-9
    assert billed.covered_until["n1"] == t[3]


def test_billed_cost_is_unknown_when_a_billed_interval_has_no_price() -> None:
    billed = hist.billed([hist.Interval("n1", T0, T0 + timedelta(seconds=10), None)])
    assert billed.seconds == 10.0 and billed.cost is None


def test_intervals_start_at_billed_from_and_end_at_the_last_event() -> None:
    events = [
        _ev("start", "initial", "a", 60, billed_from=format_time(T0)),
        _ev("heartbeat", None, "a", 120),
        _ev("start", "restart_after_preemption", "b", 500, price=None),
        _ev("stop", "done", "b", 600, price=None),
    ]
    ivs = sorted(hist.intervals(_history(events), fallback_price=1.0), key=lambda i: i.start)
    assert [(i.start, i.end, i.price_per_hour) for i in ivs] == [
        (T0, T0 + timedelta(seconds=120), 2.0),
        (T0 + timedelta(seconds=500), T0 + timedelta(seconds=600), 1.0),
    ]


def test_recovery_plan_records_lost_attempts_writes_missing_results_and_queues_the_rest() -> None:
    t = format_time(T0 + timedelta(seconds=2))
    in_flight = [["e1", 1, t], ["e2", 2, t], ["e3", 3, t], ["e4", 4, t]]
    events = [_ev("start", "initial", "a", 0), _ev("heartbeat", None, "a", 3, in_flight=in_flight)]
    completed = _attempt("e1", 1, "a", 1)
    failed = (_attempt("e2", 1, "old", 7, "model_failure"), _attempt("e2", 2, "a", 2, "model_failure"))
    history = hist.History(
        events=tuple(events),
        incarnations=hist.group_incarnations(events),
        results=frozenset({"e5"}),
        attempt_numbers={"e1": (1,), "e2": (1, 2)},
        attempts={"e1": (completed,), "e2": failed},
    )
    plan = hist.plan_recovery(
        history, "n1", NOW, ["e1", "e2", "e3", "e5", "e6"], max_attempts=2, incarnation="b"
    )
    assert (plan.reason, plan.details["previous"]["evidence"]) == ("restart_after_preemption", "lost")
    assert plan.resolved == ("a",)
    assert [(x.episode_id, x.dispatch) for x in plan.lost] == [("e3", 3), ("e4", 4)]
    (lost,) = plan.interrupted  # e4 is not in this manifest
    assert (lost.episode_id, lost.outcome, lost.attempt, lost.ended) == (
        "e3",
        "interrupted",
        1,
        T0 + timedelta(seconds=3),
    )
    assert lost.details == {"incarnation": "a", "dispatch": 3, "recorded_by": "b", "lost": True}
    assert plan.results == (completed, failed[1])
    assert plan.final == frozenset({"e1", "e2", "e5"})
    assert plan.pending == ("e3", "e6")
    assert plan.failures == {"e1": 0, "e2": 2, "e3": 0, "e6": 0}
    assert plan.next_n == {"e1": 2, "e2": 3, "e3": 2}


def test_attempts_in_flight_at_a_notice_run_on_only_if_they_should_end_before_the_margin() -> None:
    from spoteval.agent.rules import finish_by, runs_on

    # 120 s: a margin of 15 s (30 % is 36 s, at most 15) and a SIGTERM grace of 10 s (a tenth: 12 s)
    assert finish_by(100.0, 220.0) == 195.0
    assert finish_by(100.0, 102.0) == 99.5  # 2 s: the margin is at least 2 s, the grace 0.5 s
    assert finish_by(100.0, 105.0) == 102.5  # Runpod's 5 s: 2 s + 0.5 s
    assert runs_on(150.0, 50.0, 205.0) and not runs_on(160.0, 50.0, 205.0)
    assert not runs_on(150.0, None, 205.0)  # no completed attempt yet: no estimate, no running on
