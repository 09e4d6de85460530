"""One billing model: the agent's budget rule, the grant's checks and the run report agree on a record.

The record below is a pool of two VM nodes billed from boot, with price changes, a preemption and
the gap after it, an agent that died and was restarted on the same machine (its bill overlaps the
previous incarnation's), and a restart measurement (the control plane's start, then the agent's).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from spoteval import billing, report
from spoteval.agent import history as hist
from spoteval.grant import Grant
from spoteval.record import Event, RunLayout, format_time
from spoteval.store import Store
from tests.test_report import RUN, T0, at, ev

NOW = T0 + timedelta(hours=3)
N1, N2 = "i-0pool01", "i-0pool02"


def agent_start(s: float, node: str, reason: str, price: float, boot: float, inc: str) -> Event:
    return ev(s, node, "start", reason, price, billed_from=format_time(at(boot)), incarnation=inc)


EVENTS = [
    # n1: booted at -60, the price changes at 600, preempted at 3060; the gap until the next boot
    # (3500) is not billed; that agent dies after 4000 and systemd restarts it at 4100 on the same
    # machine (billed_from 3500 again: the overlap 3500-4000 is billed once); stopped at 5000
    agent_start(0, N1, "initial", 1.2, -60, "a1"),
    ev(60, N1, "ready", None, 1.2, boot_to_agent_s=60.0, incarnation="a1"),
    ev(600, N1, "heartbeat", None, 1.5, incarnation="a1"),
    ev(3000, N1, "notice", "spot_interruption", 1.5, incarnation="a1"),
    ev(3060, N1, "preempted", "provider"),
    agent_start(3600, N1, "restart_after_preemption", 1.3, 3500, "a2"),
    ev(4000, N1, "heartbeat", None, 1.3, incarnation="a2"),
    agent_start(4100, N1, "restart_after_preemption", 1.3, 3500, "a3"),
    ev(5000, N1, "stop", "done", 1.3, incarnation="a3"),
    # n2: booted at 40, stopped at 2000; then one restart measurement: the control plane starts the
    # node at 2500 (billed from there), the agent starts on it at 2560, the measurement stops it
    agent_start(100, N2, "initial", 1.2, 40, "b1"),
    ev(1000, N2, "heartbeat", None, 1.2, incarnation="b1"),
    ev(2000, N2, "stop", "done", 1.2, incarnation="b1"),
    ev(2500, N2, "start", "measurement", 1.25, source="measure_restart", cycle=1),
    agent_start(2560, N2, "restart_after_stop", 1.25, 2510, "b2"),
    ev(3000, N2, "stop", "measurement", 1.25, source="measure_restart"),
]

#: (seconds, price) of every billed piece, by hand from the rules in spoteval/billing.py
PIECES = [
    (660, 1.2),  # n1: boot -60 -> 600
    (2460, 1.5),  # n1: 600 -> preempted 3060
    (500, 1.3),  # n1: boot 3500 -> last event 4000 of the agent that died
    (1000, 1.3),  # n1: 4000 (not the same boot's 3500 again) -> stop 5000
    (1960, 1.2),  # n2: boot 40 -> stop 2000
    (500, 1.25),  # n2: measurement start 2500 -> stop 3000 (the agent's start inside it is the same node)
]
SECONDS = sum(s for s, _ in PIECES)
COST = sum(s * p for s, p in PIECES) / 3600


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(f"file://{tmp_path}/bucket")
    layout = RunLayout(RUN)
    for seq, e in enumerate(EVENTS):
        assert store.put_new(layout.event(e.time, e.node, seq), e.dumps())
    return store


def test_the_agent_the_grant_and_the_report_bill_the_same_seconds_and_cost(store: Store) -> None:
    assert SECONDS == 7080

    # the agent, as it adds up the record at start (its own incarnation is not in the record yet)
    with ThreadPoolExecutor(4) as pool:
        history = hist.read_history(store, RunLayout(RUN), [], node=N1, now=NOW, pool=pool)
    agent = hist.billed(hist.intervals(history, fallback_price=None))

    # the grant, as the restart measurement checks the budget before a start
    grant = Grant.parse({"budget": 100})
    spent = billing.spend(history.events)
    left = grant.budget_left(history.events)

    # the report
    rep = report.analyse(report.load_run(store, RUN), now=NOW)

    assert agent.seconds == pytest.approx(SECONDS)
    assert spent.hours * 3600 == pytest.approx(SECONDS)
    assert sum(a.seconds for a in rep.allocations) == pytest.approx(SECONDS)
    assert billing.billed_seconds(history.events) == pytest.approx(SECONDS)

    assert agent.cost == pytest.approx(COST)
    assert spent.amount == pytest.approx(COST) and spent.unpriced_hours == 0
    assert left == pytest.approx(100 - COST)
    assert rep.cost == {"USD": pytest.approx(COST)} and rep.unpriced == 0
    assert billing.cost(history.events) == pytest.approx(COST)

    assert agent.covered_until == {N1: at(5000), N2: at(3000)}
    assert [(a.node, a.start, a.end, a.ended_by) for a in rep.allocations] == [
        (N1, at(-60), at(3060), "preempted"),
        (N1, at(4000 - 500), at(4000), "lost"),
        (N1, at(4000), at(5000), "stop"),
        (N2, at(40), at(2000), "stop"),
        (N2, at(2500), at(3000), "stop"),
    ]


def test_stretches_say_how_each_ended_and_where_the_bill_began() -> None:
    stretches = billing.stretches(EVENTS)
    assert [(s.node, s.closed_by, s.kind, s.from_boot) for s in stretches] == [
        (N1, "preempted", "run", True),
        (N1, "next_start", "run", True),
        (N1, "stop", "run", True),
        (N2, "stop", "run", True),
        (N2, "stop", "measurement", False),
    ]
    assert stretches[4].agent_start == at(2560)
    assert [(i.start, i.end, i.price_per_hour, i.closed_by) for i in billing.intervals_of(stretches[0])] == [
        (at(-60), at(600), 1.2, "price"),
        (at(600), at(3060), 1.5, "preempted"),
    ]


def test_an_open_stretch_runs_to_now_only_when_a_check_asks_with_now() -> None:
    events = [agent_start(0, N1, "initial", 3.6, 0, "a1"), ev(100, N1, "heartbeat", None, 3.6)]
    assert billing.billed_seconds(events) == 100
    assert billing.billed_seconds(events, now=at(1000)) == 1000
    assert billing.cost(events, now=at(1000)) == pytest.approx(1.0)


def test_without_a_billed_from_a_vm_is_billed_from_boot_as_the_ready_event_gives_it() -> None:
    events = [
        ev(100, N1, "start", "initial", 1.0),
        ev(160, N1, "ready", None, boot_to_agent_s=40.0),
        ev(400, N1, "stop", "done"),
    ]
    [stretch] = billing.stretches(events)
    assert (stretch.start, stretch.seconds, stretch.from_boot) == (at(60), 340, True)


def test_a_preemption_seen_after_a_stop_on_notice_ends_the_bill_there() -> None:
    events = [
        ev(0, N1, "start", "initial", 1.0),
        ev(100, N1, "notice", "spot_interruption"),
        ev(110, N1, "stop", "notice"),
        ev(200, N1, "preempted", "provider"),
    ]
    [stretch] = billing.stretches(events)
    assert (stretch.end, stretch.closed_by) == (at(200), "preempted")


def test_a_node_taken_before_its_agent_wrote_a_start_is_billed_from_its_launch() -> None:
    events = [ev(300, N1, "preempted", "provider", launch_time=format_time(at(100)))]
    [stretch] = billing.stretches(events)
    assert (stretch.start, stretch.end, stretch.closed_by) == (at(100), at(300), "preempted")


def test_stray_events_bill_nothing_except_evidence_of_a_running_node() -> None:
    stretches, strays = billing.node_stretches(
        N1, [ev(10, N1, "stop", "user"), ev(20, N1, "heartbeat", None, 2.0), ev(80, N1, "heartbeat")]
    )
    assert [e.kind for e in strays] == ["stop", "heartbeat"]
    assert [(s.start, s.end, s.closed_by) for s in stretches] == [(at(20), at(80), "open")]
