"""Run-wide rules of a pool: the budget bounds the money of every node together, max_runtime_hours
the wall time since the run's first start; the grant's checks before a start and each node's own
rule count the whole pool through spoteval/billing.py."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from spoteval.agent.claimed import ClaimQueue, EpisodeQueue
from spoteval.billing import POOL_KEY, is_pool, pool_wall_hours, runtime_hours, spend
from spoteval.claims import Pool
from spoteval.clouds import NodeState, Price
from spoteval.grant import Grant, Refusal
from spoteval.node_status import node_status
from spoteval.operate.decide import READ_PRICE, REFUSE, STOP, WAIT, NodeView, Timing, decide
from spoteval.operate.journal import RunView
from spoteval.record import Event
from spoteval.store import Store
from tests.operate_kit import T0

NOW = T0 + timedelta(hours=1)
TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=240)
SETTINGS = {"batch": 16, "renew_s": 10.0, "expiry_s": 45.0}


def ev(minutes: float, kind: str, node: str, *, pool: bool, reason: str | None = None) -> Event:
    details = {POOL_KEY: dict(SETTINGS)} if pool and kind == "start" else {}
    return Event(
        time=T0 + timedelta(minutes=minutes),
        run_id="r1",
        node=node,
        kind=kind,
        reason=reason,
        details=details,
        price_per_hour=1.0,
        currency="USD",
        price_source="api",
    )


def two_nodes(*, pool: bool, second_at: float = 0.0) -> tuple[Event, ...]:
    """n1 from T0, n2 from `second_at` minutes, both serving at 1.0 per hour."""
    return tuple(
        sorted(
            (
                ev(0, "start", "n1", pool=pool, reason="initial"),
                ev(50, "heartbeat", "n1", pool=pool),
                ev(second_at, "start", "n2", pool=pool, reason="initial"),
                ev(50, "heartbeat", "n2", pool=pool),
            ),
            key=lambda e: e.time,
        )
    )


def serving(events: tuple[Event, ...]) -> NodeView:
    status = node_status("n1", events, run_done=False, state=NodeState("running", "RUNNING"), now=NOW)
    return NodeView(status=status, region="r", instance_type="t", engine_restarts=False)


def run(events: tuple[Event, ...]) -> RunView:
    return RunView(events, (), 4, 2)


def test_a_pool_is_known_from_its_starts_and_its_runtime_is_wall_time_since_the_first() -> None:
    lone, pool = two_nodes(pool=False), two_nodes(pool=True, second_at=30)
    assert (is_pool(lone), is_pool(pool)) == (False, True)
    assert runtime_hours(lone, NOW) == pytest.approx(2.0)  # node time: two nodes for an hour each
    assert spend(pool, NOW).hours == pytest.approx(1.5)
    assert runtime_hours(pool, NOW) == pytest.approx(1.0)  # wall time since n1's start
    assert runtime_hours(pool, NOW, running=False) == pytest.approx(1.0)
    assert pool_wall_hours((), NOW) == 0.0


def test_the_operator_stops_a_pool_node_on_the_pools_wall_time_not_its_node_time() -> None:
    lone, pool = two_nodes(pool=False), two_nodes(pool=True)
    act = decide(serving(lone), Grant(max_runtime_hours=1.5), run(lone), now=NOW, timing=TIMING)
    assert (act.kind, act.reason) == (STOP, "stop_rule:max_runtime")
    assert act.message == "the run's node time 2.000 h reached max_runtime_hours 1.5"
    act = decide(serving(pool), Grant(max_runtime_hours=1.5), run(pool), now=NOW, timing=TIMING)
    assert (act.kind, act.reason) == (WAIT, None)
    act = decide(serving(pool), Grant(max_runtime_hours=0.9), run(pool), now=NOW, timing=TIMING)
    assert (act.kind, act.reason) == (STOP, "stop_rule:max_runtime")
    assert act.message == "the pool's wall time since its first start 1.000 h reached max_runtime_hours 0.9"


def test_the_operator_refuses_a_pool_nodes_restart_once_the_pools_wall_time_is_spent() -> None:
    pool = (*two_nodes(pool=True), ev(55, "notice", "n1", pool=True, reason="preempted"))
    stopped = node_status("n1", pool, run_done=False, state=NodeState("stopped", "TERMINATED"), now=NOW)
    view = NodeView(status=stopped, region="r", instance_type="t", engine_restarts=False)
    act = decide(view, Grant(max_runtime_hours=0.95), run(pool), now=NOW, timing=TIMING)
    assert (act.kind, act.reason) == (REFUSE, "stop_rule:max_runtime")
    act = decide(view, Grant(max_runtime_hours=1.5), run(pool), now=NOW, timing=TIMING)
    assert (act.kind, act.reason) == (READ_PRICE, None)


def test_the_grant_counts_the_money_of_every_node_of_the_pool() -> None:
    pool = two_nodes(pool=True)
    assert Grant(budget=3.0).budget_left(pool, now=NOW) == pytest.approx(1.0)  # 2 nodes x 1 h x 1.0
    with pytest.raises(Refusal) as refused:
        Grant(budget=3.0).check_budget(pool, next_hours=1.5, price_per_hour=1.0, now=NOW)
    assert refused.value.stop_reason == "stop_rule:budget"
    view = serving(pool)
    act = decide(view, Grant(budget=1.9), run(pool), now=NOW, timing=TIMING, price=Price(1.0, "USD", "api"))
    assert (act.kind, act.reason) == (STOP, "stop_rule:budget")  # one node alone spent 1.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_each_node_counts_the_money_of_the_others_from_their_leases(tmp_path: Path) -> None:
    store, clock = Store(f"file://{tmp_path}/store"), Clock()
    eps = [f"e{i:02d}" for i in range(40)]
    kw = {"batch": 8, "renew_s": 1.0, "expiry_s": 4.0, "clock": clock}
    a, b = Pool(store, "r1", eps, "a", "ia", **kw), Pool(store, "r1", eps, "b", "ib", **kw)  # type: ignore[arg-type]
    a.join(frozenset(), {"totals": {"billed_s": 3600.0, "cost": 2.5}})
    b.join(frozenset())
    assert b.others_totals() == (3600.0, 2.5)  # a's lease 0, read at b's join
    clock.t += 1.5
    a.tick({"totals": {"billed_s": 7200.0, "cost": 5.0}})  # a's renewal carries its bill so far
    b.tick()
    queue = ClaimQueue(b, set(), log=lambda m: None, noticed=threading.Event(), state=dict)
    assert queue.run_wide(1800.0, 1.0) == (9000.0, 6.0)  # a's 7200 s and 5.0, and b's own
    assert queue.run_wide(1800.0, None) == (9000.0, None)
    assert EpisodeQueue().run_wide(1800.0, 1.0) == (None, None)  # a lone node: its own figures rule
