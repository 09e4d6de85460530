"""The deadline rule in a live run: the spot policy's answer from the record, said on the operator's
status line with the command that flips the stack, and written to the journal once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval.grant import Grant
from spoteval.operate import Operator, Timing
from spoteval.operate.deadline import DeadlineWatch
from spoteval.operate.inputs import OperateError, _deadline_workload
from spoteval.placement import parse_workload
from spoteval.placement.live import STAY, TO_ON_DEMAND, TO_SPOT, RunNow, advise, flip_command, live_policy
from tests.fake_api import FakeApi
from tests.operate_kit import Clock, Record
from tests.test_clouds_gcp import Compute
from tests.test_clouds_gcp import plane as gcp_plane

TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=5)
COMMAND = (
    "pulumi config set --stack gcp-us-central1 --path node.market on_demand "
    "&& pulumi up --stack gcp-us-central1"
)

# the tick engine's hand-computed example (tests/test_deadline_policies.py): 32 episodes of 15 min
# on one slot, B = 15 min, deadline 12 h; the operator checks every 15 min
HAND_RAW: dict[str, Any] = {
    "episodes": 32,
    "episode_minutes": 15,
    "concurrency": 1,
    "lifetime_hours": 1,
    "restart": {"wait_minutes": 60, "boot_minutes": 15},
    "prices": {"spot": 1.0, "on_demand": 3.0},
    "deadline_hours": 12,
}
HAND = parse_workload(HAND_RAW)


def now(elapsed: float, done: int, *, spot: bool = False, market: str = "spot") -> RunNow:
    return RunNow(elapsed_hours=elapsed, episodes=32, missing=32 - done, holding_spot=spot, market=market)


def test_the_live_rule_switches_where_the_simulated_policy_does() -> None:
    def act(policy: str, state: RunNow) -> str:
        advice = advise(HAND, policy, state, check_hours=0.25)
        assert advice is not None
        return advice.action

    # t = 1.25 h, 3 episodes done, no spot capacity: 7.25 h of work > 8/12 x 10.75 h: behind the pace
    assert act("uniform_progress", now(1.25, 3)) == TO_ON_DEMAND
    assert act("uniform_progress", now(1.0, 3)) == STAY
    assert act("uniform_progress", now(1.25, 3, spot=True)) == STAY  # spot is up: it stays on spot
    assert act("spot_safety_net", now(1.25, 3)) == STAY
    # t = 5.75 h, 9 done: 6.25 h left, within 5.75 h of work + 2B + one check: the safety net
    assert act("spot_safety_net", now(5.5, 9)) == STAY
    assert act("spot_safety_net", now(5.75, 9)) == TO_ON_DEMAND
    assert act("uniform_progress", now(5.75, 9, spot=True)) == TO_ON_DEMAND
    # on on-demand, t = 4 h, 13 done (cp 3.25 h >= ep(4.5 h) = 3 h): back to spot; not Greedy
    assert act("uniform_progress", now(4.0, 13, market="on_demand")) == TO_SPOT
    assert act("uniform_progress", now(3.0, 9, market="on_demand")) == STAY
    assert act("spot_safety_net", now(4.0, 13, market="on_demand")) == STAY
    assert advise(HAND, "uniform_progress", now(11.0, 32), check_hours=0.25) is None  # done


def test_the_advice_names_its_numbers_and_the_command() -> None:
    advice = advise(HAND, "uniform_progress", now(1.25, 3), check_hours=0.25)
    assert advice is not None
    command = flip_command("gcp-us-central1", "on_demand")
    assert command == COMMAND
    assert advice.text(command) == (
        "deadline (uniform_progress): switch to on-demand now (7.25 h of work left, 10.8 h to the "
        "deadline; no spot capacity now and 7.25 h > 0.667 x 10.8 h: behind the uniform pace); nothing "
        f"switches by itself, run: {command}"
    )
    assert advice.to_json() == {
        "policy": "uniform_progress",
        "action": "switch_to_on_demand",
        "market": "spot",
        "work_left_hours": 7.25,
        "hours_to_deadline": 10.75,
        "why": "no spot capacity now and 7.25 h > 0.667 x 10.8 h: behind the uniform pace",
    }


def test_the_live_policy_is_the_placements_choice_or_the_pinned_one() -> None:
    assert live_policy(parse_workload({**HAND_RAW, "deadline_hours": None})) is None
    assert (
        live_policy(parse_workload({**HAND_RAW, "deadline_policy": "uniform_progress"})) == "uniform_progress"
    )
    # spot alone keeps the safety net as a last resort
    assert live_policy(parse_workload({**HAND_RAW, "deadline_policy": "spot"})) == "spot_safety_net"
    assert live_policy(HAND) in ("spot_safety_net", "uniform_progress")


def test_a_stack_workload_with_a_deadline_it_cannot_meet_is_bad_input() -> None:
    assert _deadline_workload({"workload": {**HAND_RAW, "deadline_hours": None}}, "workload") is None
    with pytest.raises(OperateError, match=r"workload\.deadline_hours: 5 h is shorter than the work"):
        _deadline_workload({"workload": {**HAND_RAW, "deadline_hours": 5}}, "workload")


# --- in the operator's loop --------------------------------------------------------------------


@pytest.fixture
def gcp() -> Iterator[tuple[Compute, FakeApi]]:
    state = Compute(delay=0.05)
    api = FakeApi(state.handle)
    try:
        yield state, api
    finally:
        api.close()


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(f"file://{tmp_path}/store")


# 3 episodes of an hour, B = 6 min, deadline 4 h: at 30 min, with nothing done and the node taken,
# the work left (3 h) is more than 3/4 of the 3.5 h to the deadline: behind the uniform pace
LIVE = parse_workload(
    {
        "episodes": 3,
        "episode_minutes": 60,
        "concurrency": 1,
        "lifetime_hours": 1,
        "restart": {"wait_minutes": 10, "boot_minutes": 6},
        "prices": {"spot": 0.5, "on_demand": 1.5},
        "deadline_hours": 4,
    }
)


def test_the_operator_says_when_the_rule_fires_and_records_it_once(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    state.status = "TERMINATED"
    record.manifest(["e1", "e2", "e3"])
    record.taken("gpu-1")
    clock, said = Clock(), list[str]()
    plane = gcp_plane(api, key=None, price=0.5)
    op = Operator(
        plane.outputs,
        {plane.node: plane},
        Grant(),
        record.store,
        timing=TIMING,
        start_timeout_s=5,
        clock=clock,
        sleep=clock.sleep,
        say=said.append,
        watch=DeadlineWatch(LIVE, "uniform_progress", "gcp-us-central1"),
    )
    lines = op.check_all()
    assert [line.action for line in lines] == ["started"]  # the restart goes on as before
    command = COMMAND
    assert said[-1] == (
        "deadline (uniform_progress): switch to on-demand now (3 h of work left, 3.5 h to the deadline; "
        "no spot capacity now and 3 h > 0.75 x 3.5 h: behind the uniform pace); nothing switches by "
        f"itself, run: {command}"
    )
    [note] = [n for n in record.notes() if n["what"] == "deadline"]
    assert (note["reason"], note["node"], note["message"]) == ("switch_to_on_demand", "gpu-1", said[-1])
    assert note["details"]["command"] == command
    assert note["details"]["work_left_hours"] == 3.0 and note["details"]["hours_to_deadline"] == 3.5
    assert len(api.calls("POST", "/setMachineType")) == 0  # nothing about the market is changed
    # the next check still says so while the node waits, and records nothing new
    state.status = "TERMINATED"
    record.event(35, "gpu-1", "notice", "preempted")
    clock.advance(600)
    op.check_all()
    assert said[-1].startswith(
        "deadline (uniform_progress): switch to on-demand now (3 h of work left, 3.33 h"
    )
    assert len([n for n in record.notes() if n["what"] == "deadline"]) == 1
    # status reads the same answer (the node taken again) and writes nothing
    state.status = "TERMINATED"
    statuses = op.status()
    advice = op.deadline_advice(statuses)
    assert advice is not None and advice.action == TO_ON_DEMAND
    assert len([n for n in record.notes() if n["what"] == "deadline"]) == 1


def test_without_a_deadline_the_operator_says_nothing_about_it(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    state.status = "TERMINATED"
    record.manifest(["e1", "e2", "e3"])
    record.taken("gpu-1")
    clock, said = Clock(), list[str]()
    plane = gcp_plane(api, key=None, price=0.5)
    op = Operator(
        plane.outputs, {plane.node: plane}, Grant(), record.store, timing=TIMING, clock=clock, say=said.append
    )
    op.check_all()
    assert not any(s.startswith("deadline") for s in said)
    assert op.deadline_advice(op.status()) is None
    assert record.notes() == []
