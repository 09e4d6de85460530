"""The grant: parsing, placement checks, and the spending checks that read the run record."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from spoteval.grant import Grant, GrantError, Refusal, billed_intervals, spend
from spoteval.record import Event

T0 = datetime(2026, 11, 30, 4, 0, tzinfo=timezone.utc)


def ev(minutes: float, kind: str, reason: str | None = None, node: str = "n1", **kw: Any) -> Event:
    return Event(T0 + timedelta(minutes=minutes), "run1", node, kind, reason, **kw)


def start(minutes: float, price: float | None, node: str = "n1", currency: str = "USD") -> Event:
    return ev(
        minutes,
        "start",
        "measurement",
        node,
        price_per_hour=price,
        currency=currency,
        price_source="unknown" if price is None else "api",
    )


# --- parsing and placement ------------------------------------------------------------------------


def test_grant_parse_names_the_unknown_key() -> None:
    with pytest.raises(GrantError, match=r"grant\.budgte: unknown key"):
        Grant.parse({"budgte": 5})


def test_region_outside_the_grant_is_refused_and_inside_is_allowed() -> None:
    grant = Grant.parse({"regions": ["us-east-1"]})
    grant.check_region("us-east-1")
    with pytest.raises(GrantError, match="eu-west-1"):
        grant.check_region("eu-west-1")


def test_instance_type_outside_the_grant_is_refused() -> None:
    grant = Grant.parse({"instance_types": ["g6.xlarge"]})
    grant.check_instance_type("g6.xlarge")
    with pytest.raises(GrantError, match=r"p5\.48xlarge"):
        grant.check_instance_type("p5.48xlarge")


# --- billed intervals -------------------------------------------------------------------------------


def test_start_to_stop_is_one_billed_interval_at_the_start_price() -> None:
    events = [start(0, 2.0), ev(30, "heartbeat"), ev(60, "stop", "measurement")]
    [interval] = billed_intervals(events)
    assert interval.hours == pytest.approx(1.0)
    assert interval.cost == pytest.approx(2.0)
    assert interval.closed_by == "stop"


def test_preempted_closes_the_interval_and_stopped_time_is_not_billed() -> None:
    events = [
        start(0, 1.0),
        ev(30, "preempted", "provider"),
        start(90, 1.0),
        ev(120, "stop", "measurement"),
    ]
    assert spend(events).hours == pytest.approx(1.0)  # 30 min + 30 min; the 60 min stopped are free
    assert spend(events).amount == pytest.approx(1.0)


def test_open_interval_runs_to_the_last_heartbeat() -> None:
    events = [start(0, 3.0), ev(10, "heartbeat"), ev(20, "heartbeat"), ev(5, "ready")]
    [interval] = billed_intervals(events)
    assert interval.end == T0 + timedelta(minutes=20)
    assert interval.closed_by == "open"
    assert spend(events).amount == pytest.approx(1.0)


def test_open_interval_runs_to_now_when_now_is_given() -> None:
    events = [start(0, 3.0), ev(10, "heartbeat")]
    assert spend(events, now=T0 + timedelta(minutes=40)).amount == pytest.approx(2.0)


def test_a_newer_price_on_a_heartbeat_reprices_the_rest_of_the_interval() -> None:
    events = [
        start(0, 1.0),
        ev(30, "heartbeat", price_per_hour=3.0, currency="USD", price_source="api"),
        ev(60, "stop", "done"),
    ]
    assert spend(events).amount == pytest.approx(0.5 + 1.5)


def test_intervals_are_per_node() -> None:
    events = [
        start(0, 1.0, "a"),
        start(0, 2.0, "b"),
        ev(60, "stop", "done", "a"),
        ev(30, "stop", "done", "b"),
    ]
    assert spend(events).amount == pytest.approx(1.0 + 1.0)


def test_second_start_without_stop_closes_the_first_at_its_last_event() -> None:
    events = [start(0, 1.0), ev(15, "heartbeat"), start(60, 1.0), ev(75, "stop", "done")]
    assert spend(events).hours == pytest.approx(0.5)


def test_stop_without_start_costs_nothing() -> None:
    assert spend([ev(10, "stop", "user")]).amount == 0.0


# --- budget ------------------------------------------------------------------------------------------


def test_budget_left_subtracts_what_the_record_shows() -> None:
    grant = Grant.parse({"budget": 10})
    events = [start(0, 2.0), ev(90, "stop", "measurement")]
    assert grant.budget_left(events) == pytest.approx(7.0)


def test_no_budget_means_no_budget_check() -> None:
    assert Grant().budget_left([start(0, 100.0), ev(600, "stop", "done")]) is None
    assert Grant().check_budget([], next_hours=1000, price_per_hour=None) is None


def test_start_that_could_exceed_the_budget_is_refused_with_stop_rule_budget() -> None:
    grant = Grant.parse({"budget": 3})
    events = [start(0, 2.0), ev(60, "stop", "measurement")]  # 2 spent, 1 left
    assert grant.check_budget(events, next_hours=0.4, price_per_hour=2.0) == pytest.approx(1.0)
    with pytest.raises(Refusal) as info:
        grant.check_budget(events, next_hours=0.6, price_per_hour=2.0)
    assert info.value.stop_reason == "stop_rule:budget"
    assert info.value.key == "budget"


def test_unpriced_hours_count_at_the_fallback_price() -> None:
    grant = Grant.parse({"budget": 10})
    events = [start(0, None), ev(60, "stop", "done")]
    assert grant.budget_left(events, fallback_price=4.0) == pytest.approx(6.0)
    with pytest.raises(Refusal, match="no price"):
        grant.budget_left(events)


def test_record_in_another_currency_is_refused() -> None:
    grant = Grant.parse({"budget": 10, "currency": "EUR"})
    with pytest.raises(Refusal, match="USD"):
        grant.budget_left([start(0, 1.0), ev(60, "stop", "done")])


# --- price cap ---------------------------------------------------------------------------------------


def test_price_above_the_cap_is_refused_with_stop_rule_price_cap() -> None:
    grant = Grant.parse({"price_cap": 1.5})
    grant.check_price_now(1.5, "USD")
    with pytest.raises(Refusal) as info:
        grant.check_price_now(1.51, "USD")
    assert info.value.stop_reason == "stop_rule:price_cap"
    assert "1.51" in str(info.value)


def test_unknown_price_with_a_cap_is_refused_and_without_a_cap_is_allowed() -> None:
    with pytest.raises(Refusal, match="unknown"):
        Grant.parse({"price_cap": 1}).check_price_now(None, "USD")
    Grant().check_price_now(None, "USD")


def test_price_in_another_currency_than_the_cap_is_refused() -> None:
    with pytest.raises(Refusal, match="EUR"):
        Grant.parse({"price_cap": 1}).check_price_now(0.5, "EUR")
