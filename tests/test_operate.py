"""The operator against the control planes' loopback fakes (GCP Compute, Azure ARM, Nebius gRPC, Runpod
REST v2) and moto EC2: a node taken by the provider starts again within the grant, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from spoteval.clouds import ControlPlane, NodeState, PlaneConfig, Price, StackOutputs, open_plane
from spoteval.clouds.nebius import NebiusPlane
from spoteval.clouds.runpod import RunpodApi, RunpodPlane
from spoteval.grant import Grant
from spoteval.node_status import DONE, PREEMPTED, SERVING, STOPPED_BY_RULE
from spoteval.operate import Operator, Timing
from tests import servers
from tests.fake_api import FakeApi
from tests.fake_nebius import FakeNebius, State
from tests.fake_runpod import FakeRunpod
from tests.operate_kit import T0, Clock, Record
from tests.test_clouds_azure import Arm
from tests.test_clouds_azure import plane as azure_plane
from tests.test_clouds_gcp import Compute
from tests.test_clouds_gcp import plane as gcp_plane

TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=5)


def operator(plane: ControlPlane, record: Record, clock: Clock, grant: Grant | None = None) -> Operator:
    outputs: StackOutputs = plane.outputs  # type: ignore[attr-defined]
    return Operator(
        outputs,
        {plane.node: plane},
        grant or Grant(),
        record.store,
        timing=TIMING,
        start_timeout_s=5,
        clock=clock,
        sleep=clock.sleep,
    )


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(f"file://{tmp_path}/store")


@pytest.fixture
def gcp() -> Iterator[tuple[Compute, FakeApi]]:
    state = Compute(delay=0.05)
    api = FakeApi(state.handle)
    try:
        yield state, api
    finally:
        api.close()


def _taken_gcp(state: Compute, record: Record) -> None:
    state.status = "TERMINATED"
    record.manifest(["e1", "e2", "e3"], done=["e1"])
    record.taken("gpu-1")


# --- GCP -------------------------------------------------------------------------------------------


def test_gcp_node_taken_with_work_left_is_started_and_the_start_recorded(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    _taken_gcp(state, record)
    clock = Clock()
    lines = operator(gcp_plane(api, key=None, price=0.5), record, clock).check_all()
    assert [(line.status.status, line.action) for line in lines] == [(PREEMPTED, "started")]
    assert len(api.calls("POST", "/start")) == 1
    assert state.current() in ("STAGING", "RUNNING")
    [start] = record.operator_events()
    assert (start.kind, start.reason, start.node) == ("start", "restart_after_preemption", "gpu-1")
    assert (start.price_per_hour, start.currency, start.price_source) == (0.5, "USD", "configured")
    assert start.time == clock.now
    assert start.details["waited_s"] == 600.0  # from the notice (T0+20 min) to running (T0+30 min)
    assert start.details["capacity_errors"] == 0
    assert start.details["evidence"] == "notice:preempted"
    assert record.notes() == []


def test_gcp_price_above_the_cap_is_refused_once_and_says_how_to_widen_the_grant(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    _taken_gcp(state, record)
    clock = Clock()
    op = operator(gcp_plane(api, key=None, price=0.5), record, clock, Grant(price_cap=0.4))
    first = op.check_all()
    clock.advance(60)
    second = op.check_all()
    assert api.calls("POST", "/start") == []
    assert [(line.status.status, line.action) for line in first + second] == [
        (PREEMPTED, "refused"),
        (STOPPED_BY_RULE, "refused"),
    ]
    assert "raise spot-eval:grant.price_cap" in first[0].message
    notes = record.notes()
    assert [(n["what"], n["reason"]) for n in notes] == [("refused", "stop_rule:price_cap")]
    assert "0.5 USD per hour, is above the grant's price_cap 0.4" in notes[0]["message"]
    assert record.operator_events() == []
    clock.advance(60)  # the user widened the grant: the next check starts it
    widened = operator(gcp_plane(api, key=None, price=0.5), record, clock, Grant(price_cap=0.6))
    assert [line.action for line in widened.check_all()] == ["started"]
    [start] = record.operator_events()
    assert (start.details["evidence"], start.details["waited_s"]) == ("notice:preempted", 600.0 + 120)


def test_gcp_budget_spent_is_not_started(gcp: tuple[Compute, FakeApi], record: Record) -> None:
    state, api = gcp
    state.status = "TERMINATED"
    record.manifest(["e1", "e2"])
    record.taken("gpu-1", hours=3)  # 3 h at 0.5 per hour: 1.5 spent
    clock = Clock(T0 + timedelta(hours=4))
    lines = operator(gcp_plane(api, key=None, price=0.5), record, clock, Grant(budget=1.0)).check_all()
    assert [(line.status.status, line.action) for line in lines] == [(PREEMPTED, "refused")]
    assert api.calls("POST", "/start") == []
    assert [(n["what"], n["reason"]) for n in record.notes()] == [("refused", "stop_rule:budget")]
    assert "raise spot-eval:grant.budget" in lines[0].message


def test_gcp_run_done_stops_a_running_node_instead(gcp: tuple[Compute, FakeApi], record: Record) -> None:
    _, api = gcp
    record.manifest(["e1", "e2"], done=["e1", "e2"])
    record.event(0, "gpu-1", "start", "initial")
    record.event(10, "gpu-1", "heartbeat")
    clock = Clock()
    op = operator(gcp_plane(api, key=None, price=0.5), record, clock)
    lines = op.run(max_passes=5)
    assert [(line.status.status, line.action) for line in lines] == [(DONE, "stopped")]
    assert clock.slept == []  # settled after the first pass
    assert len(api.calls("POST", "/stop")) == 1
    assert api.calls("POST", "/start") == []
    [stop] = record.operator_events()
    assert (stop.kind, stop.reason, stop.price_per_hour) == ("stop", "done", None)
    again = op.check_all()  # stopped and done: nothing more
    assert [(line.status.status, line.action) for line in again] == [(DONE, "watching")]
    assert len(api.calls("POST", "/stop")) == 1


def test_gcp_capacity_error_is_recorded_and_retried_with_backoff(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    _taken_gcp(state, record)
    state.start_error = {
        "httpErrorStatusCode": 503,
        "httpErrorMessage": "SERVICE UNAVAILABLE",
        "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no L4 in us-central1-a"}]},
    }
    clock = Clock()
    op = operator(gcp_plane(api, key=None, price=0.5), record, clock)
    actions = []
    began = clock.now
    for at in (0, 30, 61, 121, 180, 182):  # refused at 0 (next try at 60), at 61 (next at 181)
        clock.now = began + timedelta(seconds=at)
        if at == 182:
            state.start_error = None
        actions.append(op.check_all()[0].action)
    assert actions == ["capacity", "watching", "capacity", "watching", "watching", "started"]
    assert len(api.calls("POST", "/start")) == 3
    notes = record.notes()
    assert [(n["what"], n["details"]["attempt"], n["details"]["next_try_s"]) for n in notes] == [
        ("capacity_error", 1, 60.0),
        ("capacity_error", 2, 120.0),
    ]
    assert "ZONE_RESOURCE_POOL_EXHAUSTED: no L4 in us-central1-a" in notes[0]["message"]
    [start] = record.operator_events()
    assert start.details["capacity_errors"] == 2
    assert start.details["waited_s"] == 600.0 + 182  # S_wait: from the notice to running


# --- Azure, Nebius, Runpod -------------------------------------------------------------------------


@pytest.fixture
def arm() -> Iterator[tuple[Arm, FakeApi]]:
    state = Arm(delay=0.05)
    api = FakeApi(state.handle)
    state.url = api.url
    try:
        yield state, api
    finally:
        api.close()


def test_azure_evicted_vm_is_started_and_an_allocation_failure_waits(
    arm: tuple[Arm, FakeApi], record: Record
) -> None:
    state, api = arm
    state.power = "deallocated"
    record.manifest(["e1", "e2"])
    record.taken("gpu-vm")
    state.start_error = {"code": "AllocationFailed", "message": "Allocation failed. Not enough capacity."}
    clock = Clock()
    op = operator(azure_plane(api, price=0.4), record, clock)
    assert op.check_all()[0].action == "capacity"
    assert [n["what"] for n in record.notes()] == ["capacity_error"]
    assert "AllocationFailed" in record.notes()[0]["message"]
    state.start_error = None
    clock.advance(60)
    assert op.check_all()[0].action == "started"
    assert len(api.calls("POST", "/start")) == 2
    [start] = record.operator_events()
    assert (start.node, start.reason, start.price_source) == ("gpu-vm", "restart_after_preemption", "api")
    assert start.price_per_hour == 0.1234  # the Retail Prices spot meter


@pytest.fixture
def nebius() -> Iterator[FakeNebius]:
    server = FakeNebius()
    try:
        yield server
    finally:
        server.close()


def _nebius_plane(fake: FakeNebius, node: str) -> NebiusPlane:
    outputs = StackOutputs.parse(
        {
            "provider": "nebius",
            "region": "eu-north1",
            "node_ids": [node],
            "instance_type": "gpu-l40s-a/1gpu-8vcpu-32gb",
            "market": "spot",
            "bucket_url": "s3://spot-eval-results/evals",
            "run_id": "r1",
            "server_port": 8000,
        }
    )
    return NebiusPlane(outputs, node, PlaneConfig(poll_s=0.01, configured_price=1.1), fake.sdk())


def test_nebius_stopped_preemptible_vm_is_started_at_the_spot_price(
    nebius: FakeNebius, record: Record
) -> None:
    node = "computeinstance-e00spot"
    nebius.add(node, State.STOPPED)
    nebius.add_spot_price("eu-north1", "gpu-l40s-a", "0.9")
    record.manifest(["e1"])
    record.taken(node)
    lines = operator(_nebius_plane(nebius, node), record, Clock()).check_all()
    assert [line.action for line in lines] == ["started"]
    assert nebius.methods().count("Start") == 1
    [start] = record.operator_events()
    assert (start.price_per_hour, start.price_source) == (0.9, "api")


@pytest.fixture
def runpod() -> Iterator[FakeRunpod]:
    fake = FakeRunpod(boot_polls=1)
    try:
        yield fake
    finally:
        fake.close()


def runpod_outputs(fake: FakeRunpod, pod: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "runpod",
        "region": "EU-RO-1",
        "node_ids": [pod],
        "instance_type": "NVIDIA L4",
        "market": "on_demand",
        "bucket_url": "s3://results/evals",
        "run_id": "r1",
        "server_port": 8000,
        "address_kind": "public",
        "max_price_per_gpu": 0.5,
        **extra,
    }


def _runpod_plane(fake: FakeRunpod, pod: str) -> RunpodPlane:
    api = RunpodApi(api_key=fake.env["RUNPOD_API_KEY"], rest_url=fake.url)
    return RunpodPlane(StackOutputs.parse(runpod_outputs(fake, pod)), pod, PlaneConfig(poll_s=0.01), api)


def test_runpod_exited_pod_is_started_at_the_list_price(runpod: FakeRunpod, record: Record) -> None:
    runpod.add_pod("pod1", status="EXITED")
    record.manifest(["e1", "e2"])
    record.taken("pod1")
    lines = operator(_runpod_plane(runpod, "pod1"), record, Clock()).check_all()
    assert [line.action for line in lines] == ["started"]
    assert runpod.actions("start") == ["pod1"]
    [start] = record.operator_events()
    assert (start.price_per_hour, start.price_source) == (0.43, "api")


# --- status reads only ------------------------------------------------------------------------------


def test_status_makes_no_mutating_call_on_any_provider(
    gcp: tuple[Compute, FakeApi],
    arm: tuple[Arm, FakeApi],
    nebius: FakeNebius,
    runpod: FakeRunpod,
    tmp_path: Path,
) -> None:
    gstate, gapi = gcp
    astate, aapi = arm
    gstate.status, astate.power = "TERMINATED", "deallocated"
    nebius.add("computeinstance-e00spot", State.STOPPED)
    runpod.add_pod("pod1", status="EXITED")
    planes: list[ControlPlane] = [
        gcp_plane(gapi, key=None, price=0.5),
        azure_plane(aapi, price=0.4),
        _nebius_plane(nebius, "computeinstance-e00spot"),
        _runpod_plane(runpod, "pod1"),
    ]
    for i, plane in enumerate(planes):
        record = Record(f"file://{tmp_path}/store{i}")
        record.manifest(["e1", "e2"])
        record.taken(plane.node.rsplit("/", 1)[-1])
        keys = record.keys()
        [status] = operator(plane, record, Clock()).status()
        assert (status.status, status.reason) == (PREEMPTED, "notice:preempted")
        assert record.keys() == keys  # nothing written
    assert {r.method for r in gapi.requests} == {"GET"}
    assert {r.method for r in aapi.requests} == {"GET"}
    assert set(nebius.methods()) == {"Get"}
    assert set(runpod.operations()) == {"getPod"}


# --- AWS (moto) --------------------------------------------------------------------------------------


@pytest.fixture
def moto_ec2(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> servers.Server:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    return moto_server


def launch_spot() -> str:
    reply = boto3.client("ec2").run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="g6.xlarge",
        Placement={"AvailabilityZone": "us-east-1b"},
        InstanceMarketOptions={
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "persistent", "InstanceInterruptionBehavior": "stop"},
        },
    )
    return reply["Instances"][0]["InstanceId"]


def aws_plane(node: str, store_url: str) -> ControlPlane:
    outputs = StackOutputs.parse(
        {
            "provider": "aws",
            "region": "us-east-1",
            "zone": "us-east-1b",
            "node_ids": [node],
            "instance_type": "g6.xlarge",
            "market": "spot",
            "bucket_url": store_url,
            "run_id": "r1",
            "server_port": 8000,
        }
    )
    return open_plane(outputs, node, PlaneConfig(poll_s=0.02))


def test_aws_spot_instance_stopped_by_an_interruption_is_started_and_then_stopped_when_done(
    moto_ec2: servers.Server, record: Record
) -> None:
    node = launch_spot()
    plane = aws_plane(node, "file:///unused")
    ec2 = boto3.client("ec2")
    ec2.stop_instances(InstanceIds=[node])  # the simulated interruption: nothing in the record stopped it
    record.manifest(["e1", "e2"], done=["e1"])
    record.taken(node)
    clock = Clock()
    op = operator(plane, record, clock, Grant(price_cap=1.0))
    assert [(line.status.status, line.action) for line in op.check_all()] == [(PREEMPTED, "started")]
    assert plane.state().running
    [start] = record.operator_events()
    assert (start.reason, start.price_source) == ("restart_after_preemption", "api")
    assert start.price_per_hour == pytest.approx(0.00001)  # moto's spot price history
    record.store.put(record.layout.result("e2"), b"{}")  # the run finishes
    clock.advance(60)
    assert [(line.status.status, line.action) for line in op.check_all()] == [(DONE, "watching")]
    record.event(31, node, "stop", "done", incarnation="inc-2")  # the agent stopped, the VM still runs
    clock.advance(60)
    assert [(line.status.status, line.action) for line in op.check_all()] == [(DONE, "stopped")]
    assert plane.state().stopped
    assert [(e.kind, e.reason) for e in record.operator_events()] == [("start", "restart_after_preemption")]
    assert [(n["what"], n["reason"]) for n in record.notes()] == [("stopped", "done")]


def test_aws_serving_node_under_the_cap_is_watched(moto_ec2: servers.Server, record: Record) -> None:
    node = launch_spot()
    record.manifest(["e1"])
    record.event(0, node, "start", "initial")
    record.event(29, node, "heartbeat")
    lines = operator(aws_plane(node, "file:///unused"), record, Clock(), Grant(price_cap=1.0)).check_all()
    assert [(line.status.status, line.action) for line in lines] == [(SERVING, "watching")]
    assert record.operator_events() == []


def test_aws_node_the_engine_restarted_above_the_cap_is_stopped(
    moto_ec2: servers.Server, record: Record
) -> None:
    node = launch_spot()
    plane = aws_plane(node, "file:///unused")
    record.manifest(["e1"])
    record.event(0, node, "start", "restart_after_preemption")
    lines = operator(plane, record, Clock(), Grant(price_cap=0.000001)).check_all()
    assert [(line.status.status, line.action) for line in lines] == [(SERVING, "stopped")]
    assert plane.state().stopped
    [stop] = record.operator_events()
    assert (stop.kind, stop.reason) == ("stop", "stop_rule:price_cap")


class _Broken:
    """A plane whose SDK fails in a way no plane module wrapped."""

    provider = "gcp"
    node = "broken-1"
    restarts_itself = False
    can_stay_stopped = True

    def state(self) -> Any:
        raise RuntimeError("socket closed")


def test_one_node_failing_unexpectedly_leaves_the_others_operated(
    gcp: tuple[Compute, FakeApi], record: Record
) -> None:
    state, api = gcp
    _taken_gcp(state, record)
    good = gcp_plane(api, key=None, price=0.5)
    op = Operator(
        good.outputs,
        {"broken-1": _Broken(), good.node: good},  # type: ignore[dict-item]
        Grant(),
        record.store,
        timing=TIMING,
        start_timeout_s=5,
        clock=Clock(),
    )
    lines = op.check_all()
    assert [(line.node, line.action, line.message) for line in lines] == [
        ("broken-1", "error", "unexpected RuntimeError: socket closed"),
        (good.node, "started", "restart_after_preemption at 0.5 USD/h (configured)"),
    ]


class _Finishing:
    """A node whose agent records its own stop and ends at the moment the operator asks its state
    (as a pool node that finds nothing left does)."""

    provider = "gcp"
    restarts_itself = False
    can_stay_stopped = True

    def __init__(self, node: str, record: Record) -> None:
        self.node, self.record, self.starts = node, record, 0
        self.outputs = StackOutputs(
            "gcp", "r", "z", (node,), "g2", "spot", "file:///unused", "r1", 0, "private"
        )

    def state(self) -> NodeState:
        if not self.starts:
            self.record.event(30, self.node, "stop", "stop_rule:idle")  # written, then the node ends
        return NodeState("stopped", "TERMINATED")

    def start(self, timeout_s: float) -> None:
        self.starts += 1

    def stop(self, timeout_s: float) -> None:
        raise AssertionError("nothing to stop")

    def address(self) -> str | None:
        return None

    def simulate_preemption(self, timeout_s: float) -> str:
        raise AssertionError("not a measurement")

    def price_now(self) -> Price:
        return Price(0.5, "USD", "configured")


def test_a_node_that_records_its_stop_and_ends_as_it_is_checked_is_not_taken_for_lost(
    record: Record,
) -> None:
    record.manifest(["e1", "e2"])
    record.event(0, "n1", "start", "initial", heartbeat_s=30)
    plane = _Finishing("n1", record)
    op = Operator(plane.outputs, {"n1": plane}, Grant(), record.store, timing=TIMING, clock=Clock())
    [line] = op.check_all()  # its state is read first, then the record: the stop is seen
    assert (line.status.status, line.action, plane.starts) == (STOPPED_BY_RULE, "watching", 0)
    assert record.operator_events() == []
