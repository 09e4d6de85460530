"""The operator's start and the agent's own start on the restarted node are one allocation in the
report: tau counts one preemption, S_wait runs from the preemption to the operator's start, and the
node-time is billed once. The report and the operator agree on each node's status."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from spoteval.grant import Grant
from spoteval.node_status import PREEMPTED, SERVING, STOPPED, node_status
from spoteval.operate import Operator, Timing
from spoteval.report import analyse, load_run
from tests.fake_api import FakeApi
from tests.operate_kit import T0, Clock, Record
from tests.test_clouds_gcp import Compute
from tests.test_clouds_gcp import plane as gcp_plane


@pytest.fixture
def gcp() -> Iterator[tuple[Compute, FakeApi]]:
    state = Compute(delay=0.05)
    api = FakeApi(state.handle)
    try:
        yield state, api
    finally:
        api.close()


def test_an_operated_restart_is_one_allocation_one_preemption_and_its_wait(
    gcp: tuple[Compute, FakeApi], tmp_path: Path
) -> None:
    state, api = gcp
    state.status = "TERMINATED"
    record = Record(f"file://{tmp_path}/store")
    record.manifest(["e1", "e2"])
    record.taken("gpu-1")  # start at T0, heartbeat T0+10 min, the provider's notice at T0+20 min
    clock = Clock()  # T0+30 min
    plane = gcp_plane(api, key=None, price=0.5)
    op = Operator(plane.outputs, {plane.node: plane}, Grant(), record.store, timing=Timing(), clock=clock)
    assert [line.action for line in op.check_all()] == ["started"]
    # the agent boots on the restarted node and writes its own start, then works and stops when done
    record.event(31, "gpu-1", "start", "restart_after_preemption", incarnation="inc-2", heartbeat_s=30)
    record.event(32, "gpu-1", "ready", None, incarnation="inc-2", boot_to_agent_s=45.0)
    record.event(50, "gpu-1", "heartbeat", None, incarnation="inc-2")
    record.event(60, "gpu-1", "stop", "done", incarnation="inc-2")

    report = analyse(load_run(record.store, "r1"), now=T0 + timedelta(minutes=90))
    allocs = report.allocations
    assert [(a.start - T0, a.end - T0, a.ended_by, a.start_reason) for a in allocs] == [
        (timedelta(0), timedelta(minutes=20), "notice", "initial"),
        (timedelta(minutes=30), timedelta(minutes=60), "stop", "restart_after_preemption"),
    ]
    assert allocs[1].agent_start == T0 + timedelta(minutes=31)
    assert report.tau is not None
    assert (report.tau.preemptions, report.tau.censored) == (1, 1)
    assert report.wait is not None and report.wait.mean == 600.0  # S_wait: notice -> the operator's start
    assert report.cost == {"USD": pytest.approx(0.5 * 20 / 60 + 0.5 * 30 / 60)}
    assert [p for p in report.problems if p.category == "inconsistent"] == []


def test_the_report_and_the_operator_read_the_same_status(tmp_path: Path) -> None:
    record = Record(f"file://{tmp_path}/store")
    record.taken("n1")
    events = record.events()
    later = T0 + timedelta(minutes=30)
    assert node_status("n1", events, run_done=False, now=later).status == PREEMPTED
    record.event(31, "n1", "start", "restart_after_preemption", incarnation="inc-2")
    events = record.events()
    assert node_status("n1", events, run_done=False, now=T0 + timedelta(minutes=31.5)).status == SERVING
    record.event(40, "n1", "stop", "user", incarnation="inc-2")
    stopped = node_status("n1", record.events(), run_done=False, now=T0 + timedelta(minutes=41))
    assert (stopped.status, stopped.reason, stopped.retry) == (STOPPED, "user", False)
