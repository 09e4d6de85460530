"""The Monte-Carlo: agreement with the closed form, the two engines, strategies, trace replay."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spoteval.placement import EXAMPLE_WORKLOAD, PlacementError, Workload, closed_form, parse_workload
from spoteval.placement.lifetime import read_trace
from spoteval.placement.simulate import Empirical, Exponential, Fixed, StrategyResult, simulate

TRACES = Path(__file__).resolve().parent / "data" / "traces"
V100_TRACE = TRACES / "preemption" / "1-node" / "aws-04-22-2023" / "us-west-2b_v100_1.json"


def make(
    *,
    episodes: int,
    concurrency: int,
    tau: float,
    d: float | None = None,
    b: float,
    w: float,
    samples: list[float] | None = None,
    **extra: Any,
) -> Workload:
    """A workload from times in hours."""
    raw: dict[str, Any] = {
        "episodes": episodes,
        "concurrency": concurrency,
        "lifetime_hours": tau,
        "restart": {"wait_minutes": w * 60, "boot_minutes": b * 60},
        "prices": {"spot": 1.0, "on_demand": 3.0, "non_preemptible": 2.0},
        **extra,
    }
    if samples is not None:
        raw["episode_minutes_samples"] = [s * 60 for s in samples]
    else:
        raw["episode_minutes"] = (d or 0) * 60
    return parse_workload(raw)


def spot_only(w: Workload, **kwargs: Any) -> StrategyResult:
    return simulate(w, strategies=["spot"], **kwargs).strategies["spot"]


# --- agreement with the closed form ---------------------------------------------------------------

# (D/tau, B/tau, W/tau): short and long episodes, cheap and dear restarts, short and long waits
GRID = [
    (0.02, 0.0, 0.0),
    (0.05, 0.1, 0.5),
    (0.2, 0.05, 0.1),
    (0.5, 0.5, 1.0),
    (1.0, 0.2, 2.0),
    (2.0, 0.1, 0.5),
    (0.1, 1.0, 5.0),
    (0.2 / 6, 0.15 / 6, 0.5 / 6),  # the example workload's ratios
]


@pytest.mark.parametrize(("d", "b", "w"), GRID)
def test_mean_agrees_with_the_closed_form_for_large_n(d: float, b: float, w: float) -> None:
    tau, concurrency, runs = 2.0, 4, 400
    # Enough rounds that the first boot (which the closed form leaves out) is below 0.25% of the total.
    rounds = max(500, math.ceil(400 * b / d))
    wl = make(
        episodes=rounds * concurrency, concurrency=concurrency, tau=tau, d=d * tau, b=b * tau, w=w * tau
    )
    sim = spot_only(wl, runs=runs, seed=11)
    cf = closed_form(wl)["spot"]
    # the check has power: the standard error of the simulated mean is well inside the 1% band
    assert sim.billed_std / math.sqrt(runs) < 0.003 * cf.billed_hours
    assert sim.mean_billed_hours == pytest.approx(cf.billed_hours, rel=0.01)
    assert sim.mean_wall_hours == pytest.approx(cf.wall_hours, rel=0.01)
    assert sim.mean_cost == pytest.approx(cf.expected_cost, rel=0.01)


def test_the_gap_at_small_n_is_exactly_the_first_boot() -> None:
    # N = n C with n = 5: the simulation adds the first allocation's boot, which in the renewal model
    # costs tau (e^(B/tau) - 1) billed hours and (tau + W)(e^(B/tau) - 1) wall hours on average.
    tau, b, w, runs = 1.0, 0.3, 0.5, 20000
    wl = make(episodes=5 * 8, concurrency=8, tau=tau, d=0.4, b=b, w=w)
    sim = spot_only(wl, runs=runs, seed=5)
    cf = closed_form(wl)["spot"]
    boot = math.expm1(b / tau)
    se_billed = sim.billed_std / math.sqrt(runs)
    se_wall = sim.wall_std / math.sqrt(runs)
    assert abs(sim.mean_billed_hours - (cf.billed_hours + tau * boot)) < 4 * se_billed
    assert abs(sim.mean_wall_hours - (cf.wall_hours + (tau + w) * boot)) < 4 * se_wall
    # and the closed form alone is clearly off at this size: the correction is not noise
    assert sim.mean_billed_hours - cf.billed_hours > 10 * se_billed


def test_episode_samples_agree_with_the_closed_form() -> None:
    tau = 2.0
    wl = make(episodes=2000, concurrency=4, tau=tau, samples=[0.1, 0.4, 1.2], b=0.1, w=0.4)
    sim = spot_only(wl, runs=300, seed=3)
    cf = closed_form(wl)["spot"]
    assert sim.mean_billed_hours == pytest.approx(cf.billed_hours, rel=0.01)
    assert sim.mean_wall_hours == pytest.approx(cf.wall_hours, rel=0.01)


def test_long_episodes_suffer_more_than_their_mean_length_suggests() -> None:
    tau = 2.0
    mixed = make(episodes=800, concurrency=4, tau=tau, samples=[0.1, 0.4, 1.3], b=0.1, w=0.4)
    steady = make(episodes=800, concurrency=4, tau=tau, d=0.6, b=0.1, w=0.4)
    a, b = spot_only(mixed, runs=400, seed=2), spot_only(steady, runs=400, seed=2)
    se = math.hypot(a.billed_std, b.billed_std) / math.sqrt(400)
    assert a.mean_billed_hours - b.mean_billed_hours > 5 * se


# --- the event engine against a plain one-event-at-a-time reference ----------------------------------


def reference_spot(
    episodes: int,
    slots: int,
    lengths: list[float],
    tau: float,
    wait: float,
    boot: float,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Billed and wall hours of one run, simulated the obvious way: a heap of slots, one event at a time."""
    import heapq

    t = billed = 0.0
    fresh, held = episodes, list[float]()
    pool = iter(rng.choice(lengths, size=episodes).tolist())  # the unstarted episodes' lengths
    first = True
    while True:
        if not first:
            t += wait
        first = False
        start, end = t, t + rng.exponential(tau)
        running: list[tuple[float, float]] = []
        for _ in range(slots):
            if held:
                d = held.pop()
            elif fresh:
                d, fresh = next(pool), fresh - 1
            else:
                break
            running.append((start + boot + d, d))
        heapq.heapify(running)
        now = start
        while running and running[0][0] <= end:
            now, _ = heapq.heappop(running)
            if fresh:
                d, fresh = next(pool), fresh - 1
                heapq.heappush(running, (now + d, d))
        if not running:
            return billed + now - start, now
        held = [d for _, d in running]  # interrupted: they restart first on the next allocation
        billed += end - start
        t = end


def test_event_engine_matches_a_one_event_at_a_time_reference() -> None:
    lengths, runs = [0.1, 0.3, 0.8], 3000
    rng = np.random.default_rng(12)
    ref = np.array([reference_spot(60, 4, lengths, 1.0, 0.5, 0.1, rng) for _ in range(runs)])
    wl = make(episodes=60, concurrency=4, tau=1.0, samples=lengths, b=0.1, w=0.5)
    sim = spot_only(wl, runs=runs, seed=12)
    se_billed = math.hypot(ref[:, 0].std(), sim.billed_std) / math.sqrt(runs)
    se_wall = math.hypot(ref[:, 1].std(), sim.wall_std) / math.sqrt(runs)
    assert abs(sim.mean_billed_hours - ref[:, 0].mean()) < 4 * se_billed
    assert abs(sim.mean_wall_hours - ref[:, 1].mean()) < 4 * se_wall


def test_on_demand_makespan_is_list_scheduling() -> None:
    # no preemption: the reference's makespan is greedy list scheduling of i.i.d. lengths on C slots
    lengths, runs = [0.05, 0.1, 0.2, 0.3, 0.7], 2000
    rng = np.random.default_rng(4)
    ref = np.array([reference_spot(300, 16, lengths, 1e12, 0.0, 0.25, rng)[1] for _ in range(runs)])
    wl = make(episodes=300, concurrency=16, tau=1.0, samples=lengths, b=0.25, w=0.5)
    od = simulate(wl, runs=runs, seed=4, strategies=["on_demand"]).strategies["on_demand"]
    se = math.hypot(ref.std(), od.wall_std) / math.sqrt(runs)
    assert abs(od.mean_wall_hours - ref.mean()) < 4 * se


# --- the engines and the strategies ---------------------------------------------------------------


def _same(a: StrategyResult, b: StrategyResult) -> None:
    for name in ("mean_cost", "mean_billed_hours", "mean_wall_hours", "mean_preemptions"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-9), name
    assert a.p_deadline == b.p_deadline
    assert a.switched == b.switched


@pytest.mark.parametrize("deadline", [None, 24.0, 14.5])
def test_both_engines_give_the_same_runs_on_a_single_episode_length(deadline: float | None) -> None:
    wl = parse_workload({**EXAMPLE_WORKLOAD, "lifetime_hours": 1, "deadline_hours": deadline, "grant": None})
    lock = simulate(wl, runs=500, seed=9, engine="lockstep")
    events = simulate(wl, runs=500, seed=9, engine="events")
    assert lock.engine == "lockstep" and events.engine == "events"
    assert list(lock.strategies) == list(events.strategies)
    for name in lock.strategies:
        _same(lock.strategies[name], events.strategies[name])


def test_safety_net_meets_a_deadline_that_spot_alone_misses() -> None:
    wl = parse_workload({**EXAMPLE_WORKLOAD, "lifetime_hours": 1, "deadline_hours": 20, "grant": None})
    sim = simulate(wl, runs=2000, seed=1)
    spot, net = sim.strategies["spot"], sim.strategies["spot_safety_net"]
    assert spot.p_deadline is not None and spot.p_deadline < 0.5
    assert net.p_deadline == 1.0  # with a fixed B, the 2B reserve always leaves time for on-demand
    assert net.switched is not None and 0.2 < net.switched < 1.0
    assert net.mean_cost < sim.strategies["on_demand"].mean_cost
    assert net.wall_quantiles[2] <= 20


def test_safety_net_goes_on_demand_at_once_when_the_deadline_leaves_no_slack() -> None:
    # on-demand needs B + 63 D = 12.75 h; the rule asks for remaining work + 2B = 12.9 h, more than 12.8
    wl = parse_workload({**EXAMPLE_WORKLOAD, "deadline_hours": 12.8, "grant": None})
    sim = simulate(wl, runs=200, seed=1)
    net = sim.strategies["spot_safety_net"]
    assert net.switched == 1.0
    assert net.mean_cost == pytest.approx(sim.strategies["on_demand"].mean_cost)
    assert net.mean_preemptions == 0


def test_steady_options_take_one_boot_and_whole_rounds() -> None:
    sim = simulate(parse_workload(EXAMPLE_WORKLOAD), runs=50)
    # 2000 episodes on 32 slots are 63 rounds of 0.2 h (the last one partly filled), plus B = 0.15 h
    od = sim.strategies["on_demand"]
    assert od.mean_wall_hours == pytest.approx(0.15 + 63 * 0.2)
    assert od.mean_cost == pytest.approx(3.4 * (0.15 + 63 * 0.2))
    assert sim.strategies["non_preemptible"].mean_cost == pytest.approx(2.1 * (0.15 + 63 * 0.2))
    assert od.mean_preemptions == 0 and od.p_deadline == 1.0


def test_the_same_seed_gives_the_same_numbers_and_another_seed_others() -> None:
    wl = parse_workload(EXAMPLE_WORKLOAD)
    a, b, c = (spot_only(wl, runs=300, seed=s) for s in (4, 4, 5))
    assert a == b
    assert a.mean_cost != c.mean_cost


def test_sampled_waits_keep_the_mean_wall_time() -> None:
    tau = 2.0
    wl = make(episodes=2000, concurrency=4, tau=tau, d=0.2, b=0.1, w=1.0)
    sim = spot_only(wl, runs=400, seed=8, waits=Exponential(1.0))
    assert sim.mean_wall_hours == pytest.approx(closed_form(wl)["spot"].wall_hours, rel=0.01)


def test_sampled_boots_are_used_by_every_strategy() -> None:
    wl = make(episodes=64, concurrency=32, tau=1e6, d=0.2, b=0.15, w=0.5, deadline_hours=100)
    sim = simulate(wl, runs=4000, seed=1, boots=Empirical((0.1, 0.3)))
    # no preemptions at tau = 10^6 h: every strategy needs one boot (mean 0.2 h) and two rounds
    for name in ("spot", "on_demand", "non_preemptible"):
        assert sim.strategies[name].mean_wall_hours == pytest.approx(0.2 + 0.4, rel=0.02)
        assert sim.strategies[name].wall_quantiles[0] == pytest.approx(0.5)
        assert sim.strategies[name].wall_quantiles[2] == pytest.approx(0.7)


def test_strategies_without_a_price_or_deadline_are_skipped_with_a_reason() -> None:
    wl = parse_workload({**EXAMPLE_WORKLOAD, "prices": {"spot": 1.2}, "deadline_hours": None})
    sim = simulate(wl, runs=100)
    assert list(sim.strategies) == ["spot"]
    assert "no deadline" in sim.skipped["spot_safety_net"]
    assert "no on_demand price" in sim.skipped["on_demand"]
    assert sim.strategies["spot"].p_deadline is None


def test_a_workload_spot_cannot_finish_is_skipped_not_looped_forever() -> None:
    wl = parse_workload({**EXAMPLE_WORKLOAD, "lifetime_hours": 0.01})
    sim = simulate(wl, runs=100)
    assert "spot" not in sim.strategies
    assert "allocations per run" in sim.skipped["spot"]


def test_lifetimes_too_short_for_a_round_hit_the_allocation_limit() -> None:
    # a fixed lifetime shorter than B + D never completes a round
    wl = parse_workload(EXAMPLE_WORKLOAD)
    sim = simulate(wl, runs=20, lifetimes=Fixed(0.3), max_allocations=200, strategies=["spot"])
    assert "more than 200 allocations" in sim.skipped["spot"]


def test_bad_simulation_arguments_are_named() -> None:
    wl = parse_workload(EXAMPLE_WORKLOAD)
    with pytest.raises(PlacementError, match="runs"):
        simulate(wl, runs=0)
    with pytest.raises(PlacementError, match="unknown strategy 'reserved'"):
        simulate(wl, strategies=["reserved"])
    samples = parse_workload(
        {**EXAMPLE_WORKLOAD, "episode_minutes": None, "episode_minutes_samples": [5, 10]}
    )
    with pytest.raises(PlacementError, match="lockstep"):
        simulate(samples, engine="lockstep")


def test_simulation_json_carries_every_strategy() -> None:
    doc = simulate(parse_workload(EXAMPLE_WORKLOAD), runs=50).to_json()
    assert set(doc["strategies"]) == {
        "spot",
        "spot_safety_net",
        "uniform_progress",
        "on_demand",
        "non_preemptible",
    }
    assert {"mean_cost", "cost_p05", "cost_p95", "p_deadline", "mean_wall_hours"} <= set(
        doc["strategies"]["spot"]
    )
    assert doc["runs"] == 50 and doc["engine"] == "lockstep"


# --- trace replay ---------------------------------------------------------------------------------


def test_empirical_draws_only_observed_values() -> None:
    values = (0.5, 1.5, 7.0)
    drawn = Empirical(values).sample(np.random.default_rng(0), (1000,))
    assert set(np.unique(drawn)) == set(values)
    assert Empirical(values).mean == pytest.approx(3.0)


def test_trace_replay_runs_on_the_trace_lifetimes_and_waits() -> None:
    trace = read_trace(V100_TRACE)
    lifetimes, waits = np.array(trace.lifetimes_hours), np.array(trace.waits_hours)
    # enough rounds that the last allocation (not preempted, partly used) weighs under 0.2%
    rounds, runs = 10_000, 500
    wl = parse_workload({**EXAMPLE_WORKLOAD, "episodes": 32 * rounds, "deadline_hours": None, "grant": None})
    sim = simulate(
        wl,
        runs=runs,
        seed=1,
        lifetimes=Empirical(trace.lifetimes_hours, "trace lifetimes"),
        waits=Empirical(trace.waits_hours, "trace capacity waits"),
        strategies=["spot"],
    )
    assert "44 trace lifetimes" in sim.lifetimes
    assert "44 trace capacity waits" in sim.waits
    spot = sim.strategies["spot"]
    # Renewal-reward with the trace's own lifetimes: an allocation of lifetime L completes
    # floor((L - B) / D) rounds, so n rounds need n / mean(floor((L - B) / D)) allocations and
    # n * mean(L) / mean(floor((L - B) / D)) billed hours (up to the last allocation).
    per_allocation = float(np.mean(np.floor(np.maximum(lifetimes - 0.15, 0) / 0.2)))
    assert spot.mean_billed_hours == pytest.approx(rounds * lifetimes.mean() / per_allocation, rel=0.005)
    assert spot.mean_preemptions == pytest.approx(rounds / per_allocation, rel=0.005)
    # Wald: the unbilled time is the number of preemptions times the trace's mean capacity wait.
    unbilled = spot.mean_wall_hours - spot.mean_billed_hours
    assert unbilled == pytest.approx(spot.mean_preemptions * waits.mean(), rel=0.01)


def test_trace_replay_is_not_the_exponential_model() -> None:
    # the same mean lifetime, other shape: the replay's numbers differ from the closed form's
    trace = read_trace(V100_TRACE)
    tau_hat = trace.estimate().tau_hours
    assert tau_hat is not None
    wl = parse_workload({**EXAMPLE_WORKLOAD, "lifetime_hours": tau_hat, "grant": None})
    replay = spot_only(wl, runs=2000, seed=1, lifetimes=Empirical(trace.lifetimes_hours))
    twin = spot_only(wl, runs=2000, seed=1)
    se = math.hypot(replay.billed_std, twin.billed_std) / math.sqrt(2000)
    assert abs(replay.mean_billed_hours - twin.mean_billed_hours) > 5 * se
