"""Placement for a pool (`nodes: k`): k nodes sharing one queue, each preempted and booted on its own."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spoteval.placement import EXAMPLE_WORKLOAD, Workload, closed_form, parse_workload, place
from spoteval.placement.simulate import simulate

LN2 = math.log(2)
ROUND = {
    "episodes": 8,
    "episode_minutes": 60 * LN2,
    "concurrency": 2,
    "lifetime_hours": 1,
    "restart": {"wait_minutes": 30, "boot_minutes": 60 * LN2},
    "prices": {"spot": 1.5, "on_demand": 2.0},
}


def workload(**changes: Any) -> Workload:
    raw = {**EXAMPLE_WORKLOAD, **changes}
    return parse_workload({k: v for k, v in raw.items() if v is not None})


def test_closed_form_of_a_pool_divides_the_wall_time_and_adds_the_boots() -> None:
    # n = 8 / 2 = 4 rounds over k = 2 nodes, tau = 1 h, D = B = ln 2 h, W = 0.5 h:
    # spot billed = 4 * 1 * 2 * 1 = 8 h in all (as one node), wall = 8 * 1.5 / 2 = 6 h
    est = closed_form(parse_workload({**ROUND, "nodes": 2}))
    assert est["spot"].billed_hours == pytest.approx(8.0)
    assert est["spot"].wall_hours == pytest.approx(6.0)
    # on-demand: each node boots once: 2 B + n D = 6 ln 2 billed, B + n D / 2 = 3 ln 2 wall
    assert est["on_demand"].billed_hours == pytest.approx(6 * LN2)
    assert est["on_demand"].wall_hours == pytest.approx(3 * LN2)
    one = closed_form(parse_workload(ROUND))
    assert one["spot"].wall_hours == pytest.approx(12.0)
    assert one["on_demand"].billed_hours == pytest.approx(5 * LN2)


def test_a_single_node_is_the_default_and_its_json_is_unchanged() -> None:
    w = workload()
    assert w.nodes == 1 and "nodes" not in w.to_json()
    assert place(w, 0.95, 2000).break_even.to_json().keys() == {"tau_hours", "price_ratio"}


def test_the_break_even_names_the_fewest_nodes_that_meet_the_deadline() -> None:
    # 7 h: two nodes' work (6.25 h each) fits, their spot wall time (7.06 h) does not
    w = workload(nodes=2, deadline_hours=7)
    one_wall = closed_form(workload(deadline_hours=None))["spot"].wall_hours
    expected = math.ceil(one_wall / 7)
    assert expected == 3
    be = place(w, 0.5, 2000).break_even
    assert be.nodes_for_deadline == expected
    assert closed_form(workload(nodes=expected))["spot"].wall_hours <= 7
    assert closed_form(workload(nodes=expected - 1))["spot"].wall_hours > 7
    assert be.to_json()["nodes_for_deadline"] == expected


def test_the_simulation_of_a_pool_takes_its_slowest_node_and_sums_the_bills() -> None:
    runs = 400
    one = simulate(
        parse_workload({**ROUND, "episodes": 40}), runs=runs, seed=7, strategies=("spot", "on_demand")
    )
    pool = simulate(
        parse_workload({**ROUND, "episodes": 40, "nodes": 4}),
        runs=runs,
        seed=7,
        strategies=("spot", "on_demand"),
    )
    od_one, od_pool = one.strategies["on_demand"], pool.strategies["on_demand"]
    # on-demand is deterministic: B then 20 rounds of D on one node; B then 5 rounds on each of 4
    assert od_one.mean_wall_hours == pytest.approx(LN2 + 20 * LN2)
    assert od_pool.mean_wall_hours == pytest.approx(LN2 + 5 * LN2)
    assert od_pool.mean_billed_hours == pytest.approx(4 * (LN2 + 5 * LN2))
    spot_one, spot_pool = one.strategies["spot"], pool.strategies["spot"]
    assert spot_pool.mean_wall_hours < spot_one.mean_wall_hours / 2
    assert spot_pool.mean_preemptions > spot_one.mean_preemptions / 2
