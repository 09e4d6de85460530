"""The deadline policies (Greedy, Uniform Progress) on the tick engine, over traces replayed in order."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spoteval.placement import parse_workload
from spoteval.placement.availability import (
    DrawnAvailability,
    Trace,
    TraceAvailability,
    _cyclic_run_left,
    read_trace_file,
    trace_kind,
)
from spoteval.placement.engine import _Draws
from spoteval.placement.policies import IDLE, ON_DEMAND, SPOT, step
from spoteval.placement.samplers import Fixed
from spoteval.placement.simulate import simulate
from spoteval.placement.ticks import run_ticks

TRACES = Path(__file__).resolve().parent / "data" / "traces"
AVAILABILITY = sorted((TRACES / "availability" / "1-node" / "aws-10-26-2022").glob("*.json"))
PREEMPTION = sorted((TRACES / "preemption" / "1-node" / "aws-04-22-2023").glob("*.json"))


def alternating(up_ticks: int, down_ticks: int, gap_s: float, cycles: int = 40) -> Trace:
    """An availability trace: `up_ticks` up, then `down_ticks` down, repeated."""
    values = ([1.0] * up_ticks + [0.0] * down_ticks) * cycles
    return Trace("synthetic", gap_s, "availability", tuple(values))


def workload(**changes: Any) -> Any:
    raw: dict[str, Any] = {
        "episodes": 32,
        "episode_minutes": 15,
        "concurrency": 1,
        "lifetime_hours": 1,
        "restart": {"wait_minutes": 60, "boot_minutes": 15},
        "prices": {"spot": 1.0, "on_demand": 3.0},
        "deadline_hours": 12,
        **changes,
    }
    return parse_workload({k: v for k, v in raw.items() if v is not None})


def replay(w: Any, trace: Trace, policy: str, offsets: list[int], timeline: list[Any] | None = None) -> Any:
    availability = TraceAvailability(
        trace,
        len(offsets),
        np.random.SeedSequence(0),
        boots=Fixed(w.boot_hours),
        offsets=np.array(offsets),
    )
    od_boot = np.full(len(offsets), w.boot_hours)
    return run_ticks(
        w,
        availability,
        policy,
        od_boot,
        np.random.SeedSequence(1),
        deadline=w.deadline_hours,
        timeline=timeline,
    )


# --- by hand: 1 h up, 1 h down, 15-minute ticks ------------------------------------------------------
# 32 episodes of 15 min on one slot (8 h of work), boot B = 15 min, deadline 12 h, spot 1, on-demand 3.
# Each up hour is a boot and 3 episodes. The safety net fires at the first tick t with
# (12 - t) - 0.25 < W + 0.5, W the work left; uniform progress expects ep(t) = t x 8 / 12.


def test_spot_alone_takes_three_episodes_per_up_hour() -> None:
    w = workload()
    timeline: list[Any] = []
    o = replay(w, alternating(4, 4, 900), "spot", [0], timeline)
    # 32 = 10 x 3 + 2: ten whole up hours, then a boot and 2 episodes in the eleventh (from t = 20)
    assert o.wall[0] == pytest.approx(20.75)
    assert o.spot_billed[0] == pytest.approx(10.75)
    assert o.od_billed[0] == 0 and o.preemptions[0] == 10 and o.spot_done[0] == 32
    assert math.isnan(o.switch_at[0])
    assert timeline[:4] == [(0.0, "spot"), (1.0, "idle"), (2.0, "spot"), (3.0, "idle")]


def test_greedy_goes_on_demand_for_good_at_the_last_safe_tick() -> None:
    w = workload()
    timeline: list[Any] = []
    o = replay(w, alternating(4, 4, 900), "spot_safety_net", [0], timeline)
    # three up hours give 9 episodes (W = 5.75 h by t = 5); at t = 5.5, 6.25 < 5.75 + 0.5 is false,
    # at t = 5.75, 6.0 < 6.25 fires: boot to 6.0, then 23 episodes to 11.75
    assert timeline == [
        (0.0, "spot"),
        (1.0, "idle"),
        (2.0, "spot"),
        (3.0, "idle"),
        (4.0, "spot"),
        (5.0, "idle"),
        (5.75, "on_demand"),
    ]
    assert o.switch_at[0] == pytest.approx(5.75)
    assert o.switch_left[0] == pytest.approx(5.75)
    assert o.wall[0] == pytest.approx(11.75)
    assert (o.spot_billed[0], o.od_billed[0]) == pytest.approx((3.0, 6.0))
    assert o.spot_done[0] == 9  # 2.25 h of the 8 h on spot
    assert 1.0 * o.spot_billed[0] + 3.0 * o.od_billed[0] == pytest.approx(21.0)


def test_uniform_progress_catches_up_on_demand_and_comes_back_to_spot() -> None:
    w = workload()
    timeline: list[Any] = []
    o = replay(w, alternating(4, 4, 900), "uniform_progress", [0], timeline)
    # t = 1.25: idle, cp = 0.75 < ep = 0.833: on-demand (boot to 1.5). On it cp(t) = t - 0.75, and
    # cp >= ep(t + 0.5) from t = 3.25; spot is up again at t = 4: back to spot. Up hours at 4 and 6
    # bring cp to 4.75; t = 7.25: 4.75 < ep = 4.833: on-demand; cp(t) = t - 2.75 >= ep(t + 0.5) from
    # 9.25; spot at t = 10 (cp 7.25), whose 3 episodes finish the job at 11.
    assert timeline == [
        (0.0, "spot"),
        (1.0, "idle"),
        (1.25, "on_demand"),
        (4.0, "spot"),
        (5.0, "idle"),
        (6.0, "spot"),
        (7.0, "idle"),
        (7.25, "on_demand"),
        (10.0, "spot"),
    ]
    assert o.switch_at[0] == pytest.approx(1.25)
    assert o.switch_left[0] == pytest.approx(7.25)
    assert o.wall[0] == pytest.approx(11.0)
    assert (o.spot_billed[0], o.od_billed[0]) == pytest.approx((4.0, 5.5))
    assert o.spot_done[0] == 12  # 3 h of the 8 h on spot, against Greedy's 2.25 h
    assert o.preemptions[0] == 3
    assert 1.0 * o.spot_billed[0] + 3.0 * o.od_billed[0] == pytest.approx(20.5)


def test_a_preemption_loses_the_episode_in_flight() -> None:
    # 24-minute episodes: an up hour is a boot (to 0.25) and one episode (to 0.65); the next one
    # would end at 1.05, after the preemption at 1.0, and is lost
    w = workload(episodes=3, episode_minutes=24, deadline_hours=None)
    o = replay(w, alternating(4, 4, 900), "spot", [0])
    assert o.wall[0] == pytest.approx(4.65)
    assert o.spot_billed[0] == pytest.approx(2.65)
    assert o.preemptions[0] == 2


def test_a_start_in_a_down_run_waits_for_the_next_up_run() -> None:
    # starting at tick 4 (down): spot comes at 1 h; Greedy's timeline shifts by the hour and its
    # spot hours are those of the up hours before its switch
    w = workload()
    o = replay(w, alternating(4, 4, 900), "spot", [4])
    assert o.wall[0] == pytest.approx(21.75)
    assert o.spot_billed[0] == pytest.approx(10.75)


# --- the same rules, one element at a time ------------------------------------------------------


def test_the_rules_one_state_at_a_time() -> None:
    def at(policy: str, market: int, up: bool, elapsed: float, left: float, forced: bool = False) -> int:
        new, _ = step(
            policy,
            market=np.array([market]),
            up=np.array([up]),
            forced=np.array([forced]),
            elapsed=elapsed,
            work_left=np.array([left]),
            work_total=8.0,
            deadline=12.0,
            boot=0.25,
            tick=0.25,
        )
        return int(new[0])

    # uniform progress: idle and behind (cp 0.75 < ep(1.25) = 0.833): on-demand; not behind: idle
    assert at("uniform_progress", IDLE, False, 1.25, 7.25) == ON_DEMAND
    assert at("uniform_progress", IDLE, False, 1.0, 7.25) == IDLE
    assert at("uniform_progress", IDLE, True, 1.25, 7.25) == SPOT  # taking risks
    # hysteresis: ahead of ep(t + 2B) and spot up: spot; spot down: stay on-demand
    assert at("uniform_progress", ON_DEMAND, True, 4.0, 8 - 3.25) == SPOT
    assert at("uniform_progress", ON_DEMAND, False, 4.0, 8 - 3.25) == ON_DEMAND
    assert at("uniform_progress", ON_DEMAND, True, 3.0, 8 - 2.25) == ON_DEMAND
    assert at("uniform_progress", SPOT, True, 3.0, 7.9) == SPOT  # exploitation, however far behind
    # the safety net wins over everything, and stays
    assert at("uniform_progress", SPOT, True, 6.0, 5.8) == ON_DEMAND
    assert at("spot_safety_net", IDLE, True, 1.0, 5.0, forced=True) == ON_DEMAND
    assert at("spot_safety_net", IDLE, True, 1.0, 5.0) == SPOT
    assert at("spot", IDLE, True, 11.0, 8.0) == SPOT


# --- reading traces ------------------------------------------------------------------------------


def test_each_kind_of_trace_is_read_its_own_way() -> None:
    avail = read_trace_file(AVAILABILITY[0])
    assert avail.kind == "availability" and not avail.counts
    assert avail.source.endswith("us-west-2a_k80_1.json")
    # the published value is "the number of available instances": this file is up 3477 of 3895 ticks
    assert (avail.ticks, int(avail.up().sum())) == (3895, 3477)
    # a preemption trace counts the instances running: it starts at 0, before the first one runs
    pre = read_trace_file(PREEMPTION[0])
    assert pre.kind == "preemption" and pre.values[0] == 0 and not bool(pre.up()[0])
    assert pre.source.endswith("us-east-1c_v100_1.json")
    assert (pre.ticks, int(pre.up().sum())) == (19961, 6274)
    # the paper's simulator's own files read the other way round
    assert read_trace_file(PREEMPTION[0], "preempted").up()[0]
    counts = Trace("16-node", 300, "availability", (0.0, 3.0, 16.0))
    assert counts.counts
    assert counts.up(0).tolist() == [False, True, True]
    assert counts.up(3).tolist() == [False, False, True]  # node 3 needs 4 instances
    assert trace_kind("elsewhere/g5.json") == "trace"


def test_run_lengths_read_the_trace_as_a_cycle() -> None:
    up = np.array([True, True, False, True])
    # tick 3 is up and wraps round to ticks 0 and 1: three ticks until the value changes
    assert _cyclic_run_left(up).tolist() == [2.0, 1.0, 1.0, 3.0]
    assert np.isinf(_cyclic_run_left(np.array([True, True]))).all()


def test_start_ticks_are_seeded_and_leave_room_for_the_deadline() -> None:
    trace = alternating(4, 4, 900, cycles=10)  # 80 ticks of 15 min = 20 h
    a = TraceAvailability(trace, 500, np.random.SeedSequence(3), window_hours=12, boots=Fixed(0.1))
    b = TraceAvailability(trace, 500, np.random.SeedSequence(3), window_hours=12, boots=Fixed(0.1))
    assert (a.offsets == b.offsets).all()
    assert a.offsets.min() >= 0 and a.offsets.max() < 80 - 48
    up, end = a.state(np.arange(500), 0)
    assert (up == (a.offsets % 8 < 4)).all()
    assert (end[up] == ((4 - a.offsets % 8) * 0.25)[up]).all()


def test_drawn_lifetimes_are_laid_end_to_end() -> None:
    draws = _Draws(2, Fixed(1.0), Fixed(0.5), Fixed(0.2), np.random.SeedSequence(0))
    avail = DrawnAvailability(draws, 2, 0.25, "fixed")
    ids = np.arange(2)
    # up [0, 1), down [1, 1.5), up [1.5, 2.5), ...
    assert [bool(avail.state(ids, k)[0][0]) for k in range(8)] == [True] * 4 + [False] * 2 + [True] * 2
    assert avail.state(ids, 6)[1][0] == pytest.approx(2.5)
    assert avail.boot(ids).tolist() == [0.2, 0.2]


# --- consistency and the comparison the paper makes --------------------------------------------


@pytest.mark.parametrize("policy", ["spot", "spot_safety_net", "uniform_progress"])
def test_samples_of_one_length_run_as_that_length(policy: str) -> None:
    trace = read_trace_file(AVAILABILITY[6])  # us-west-2b V100
    one = workload(episodes=200, episode_minutes=12, concurrency=4, deadline_hours=14)
    same = workload(
        episodes=200, episode_minutes=None, episode_minutes_samples=[12, 12], concurrency=4, deadline_hours=14
    )
    offsets = list(range(0, 3000, 37))
    a, b = replay(one, trace, policy, offsets), replay(same, trace, policy, offsets)
    for name in ("wall", "spot_billed", "od_billed", "preemptions", "spot_done"):
        assert getattr(a, name) == pytest.approx(getattr(b, name)), name


def test_list_scheduling_on_ticks_is_the_makespan_of_one_event_at_a_time() -> None:
    # always up: no preemption; the makespan is greedy list scheduling of i.i.d. lengths on C slots
    lengths, runs, episodes, slots = [0.05, 0.1, 0.2, 0.3, 0.7], 2000, 300, 16
    rng = np.random.default_rng(4)
    ref = []
    for _ in range(runs):
        pool = rng.choice(lengths, size=episodes).tolist()
        heap = [0.25 + pool.pop() for _ in range(slots)]
        heapq.heapify(heap)
        end = 0.0
        while heap:
            end = heapq.heappop(heap)
            if pool:
                heapq.heappush(heap, end + pool.pop())
        ref.append(end)
    w = workload(
        episodes=episodes,
        episode_minutes=None,
        episode_minutes_samples=[x * 60 for x in lengths],
        concurrency=slots,
        deadline_hours=None,
    )
    o = replay(w, Trace("up", 600, "availability", (1.0,)), "spot", [0] * runs)
    se = math.hypot(np.std(ref), o.wall.std()) / math.sqrt(runs)
    assert abs(o.wall.mean() - np.mean(ref)) < 4 * se


@pytest.mark.parametrize("path", [*AVAILABILITY, *PREEMPTION], ids=lambda p: p.stem)
def test_uniform_progress_never_misses_a_deadline_that_greedy_meets(path: Path) -> None:
    trace = read_trace_file(path)
    offsets = np.random.default_rng(5).integers(0, trace.ticks, size=150).tolist()
    # one episode length (38 rounds of 12 min, B = 9 min): the 2B reserve leaves on-demand the time it
    # needs, so neither misses, with 2.4 h of slack or with 0.45 h (on-demand alone needs 7.75 h)
    for deadline in (10.0, 8.2):
        one = workload(episodes=600, episode_minutes=12, concurrency=16, deadline_hours=deadline)
        one = replace(one, boot_hours=0.15)
        greedy, up = (replay(one, trace, p, offsets) for p in ("spot_safety_net", "uniform_progress"))
        assert (greedy.wall <= deadline).all()
        assert not np.any((greedy.wall <= deadline) & (up.wall > deadline))
    # episode samples: the work left is an estimate, so on-demand's last, longest episodes can overrun
    # the reserve and either policy may miss in a run (on other episodes than the other policy ran);
    # Greedy, which leaves for on-demand late, misses here, and Uniform Progress misses less often
    samples = workload(
        episodes=600,
        episode_minutes=None,
        episode_minutes_samples=[4, 9, 12, 30],
        concurrency=16,
        deadline_hours=11,
    )
    greedy, up = (replay(samples, trace, p, offsets) for p in ("spot_safety_net", "uniform_progress"))
    assert (greedy.wall > 11).any()
    assert (up.wall <= 11).sum() > (greedy.wall <= 11).sum()


def test_the_simulation_replays_a_trace_in_order_for_every_spot_policy() -> None:
    trace = read_trace_file(AVAILABILITY[2])  # us-west-2a V100
    w = workload(episodes=2400, episode_minutes=1.2, deadline_hours=52 * 48 / 48)
    sim = simulate(w, runs=100, seed=2, trace=trace)
    assert sim.engine == "ticks"
    assert sim.ticks is not None and "replayed in order from 100 start ticks" in sim.ticks
    assert set(sim.strategies) == {"spot", "spot_safety_net", "uniform_progress", "on_demand"}
    net, up = sim.strategies["spot_safety_net"], sim.strategies["uniform_progress"]
    assert net.p_deadline == up.p_deadline == 1.0
    assert up.spot_work_hours > net.spot_work_hours
    assert up.mean_cost < net.mean_cost
    assert up.first_switch is not None and up.first_switch.to_deadline_hours is not None


@pytest.mark.parametrize("path", [PREEMPTION[2], AVAILABILITY[2]], ids=lambda p: p.stem)
def test_spot_alone_on_a_trace_is_the_tick_engines_spot_without_the_ticks(path: Path) -> None:
    # spot alone's allocations are the trace's up-runs: the event engine runs them at once
    from spoteval.placement.simulate import _child, _Runner

    trace = read_trace_file(path)
    w = workload(episodes=2000, episode_minutes=12, concurrency=32, deadline_hours=None)
    runner = _Runner(
        w,
        runs=300,
        seed=3,
        samplers=(Fixed(1.0), Fixed(0.5), Fixed(w.boot_hours)),
        engine="lockstep",
        trace=trace,
        max_allocations=20_000,
    )
    fast = runner.run("spot")
    ticks = run_ticks(
        w, runner._availability(0), "spot", runner.od_boot, _child(runner.seq_episodes, 0), deadline=None
    )
    assert fast.wall == pytest.approx(ticks.wall)
    assert fast.spot_billed == pytest.approx(ticks.spot_billed)
    assert (fast.preemptions == ticks.preemptions).all()
    assert (fast.wall > ticks.spot_billed).any()  # some runs start in a down-run or wait between runs
