"""The operator on a pool: an AWS Auto Scaling group (moto) and an Azure Spot scale set (a loopback ARM
API). The group is one node of the operator; its members are the nodes of the record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from azure.mgmt.compute import ComputeManagementClient

from spoteval.clouds import ControlPlaneError, PlaneConfig, PlaneOptions, StackOutputs, open_plane
from spoteval.clouds.groups import AwsGroupPlane, AzureScaleSetPlane, group_state
from spoteval.grant import Grant
from spoteval.node_status import DONE, PREEMPTED, SERVING, STOPPED_BY_RULE
from spoteval.operate import Operator, Timing
from tests import servers
from tests.fake_api import FakeApi, Reply, Request
from tests.operate_kit import Clock, Record
from tests.test_clouds_azure import ARM, OPS, RG, SKU, SUB, FakeCredential, LoopbackTransport, retail_item

TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=10)


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(f"file://{tmp_path}/store")


def operator(plane: Any, record: Record, clock: Clock, grant: Grant | None = None) -> Operator:
    return Operator(
        plane.outputs,
        {plane.node: plane},
        grant or Grant(),
        record.store,
        timing=TIMING,
        start_timeout_s=10,
        clock=clock,
        sleep=clock.sleep,
    )


def pool_outputs(provider: str, node: str, size: int, **extra: Any) -> StackOutputs:
    return StackOutputs.parse(
        {
            "provider": provider,
            "region": "us-east-1" if provider == "aws" else "eastus",
            "zone": "us-east-1b" if provider == "aws" else "1",
            "node_ids": [node],
            "instance_type": "g6.xlarge" if provider == "aws" else SKU,
            "market": "spot",
            "bucket_url": "file:///unused",
            "run_id": "r1",
            "server_port": 8000,
            "pool_size": size,
            **extra,
        }
    )


def test_group_state_reads_the_members_against_the_stacks_size() -> None:
    assert (group_state(0, 0, 3, [], engine_restores=True, unit="x").status) == "stopped"
    full = group_state(3, 3, 3, ["a", "b", "c"], engine_restores=False, unit="running")
    assert (full.status, full.raw, full.details["missing"]) == ("running", "3 of 3 running", 0)
    part = group_state(2, 1, 3, ["a"], engine_restores=False, unit="running")
    assert (part.status, part.raw, part.details["missing"]) == ("running", "1 of 3 running", 2)
    assert group_state(3, 0, 3, [], engine_restores=True, unit="x").status == "pending"
    assert group_state(3, 0, 3, [], engine_restores=False, unit="x").status == "stopped"


def test_the_measurement_refuses_a_pool_and_the_operator_opens_its_group() -> None:
    outputs = pool_outputs("aws", "evals-gpu-group", 2)
    with pytest.raises(ControlPlaneError, match=r"is a pool of 2: restarts are measured on a single-node"):
        open_plane(outputs, "evals-gpu-group", PlaneConfig())
    with pytest.raises(ControlPlaneError, match=r"outputs.pool_size: must be a whole number >= 0"):
        open_plane(pool_outputs("aws", "g", -1), "g", PlaneConfig(), groups=True)


# --- AWS: an Auto Scaling group on moto --------------------------------------------------------------


@pytest.fixture
def asg(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsGroupPlane]:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    name = f"evals-gpu-{time.monotonic_ns()}"
    template = ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g6.xlarge"}
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling = boto3.client("autoscaling", region_name="us-east-1")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
        MinSize=2,
        MaxSize=2,
        DesiredCapacity=2,
        AvailabilityZones=["us-east-1b"],
    )
    plane = open_plane(pool_outputs("aws", name, 2), name, PlaneConfig(poll_s=0.02), groups=True)
    assert isinstance(plane, AwsGroupPlane)
    yield plane


def _members(plane: AwsGroupPlane) -> list[str]:
    return sorted(plane.state().details["members"])


def test_aws_group_serving_is_watched_and_scaled_to_zero_when_the_run_is_done(
    asg: AwsGroupPlane, record: Record
) -> None:
    members = _members(asg)
    assert len(members) == 2 and (asg.state().status, asg.state().raw) == ("running", "2 of 2 in service")
    record.manifest(["e1", "e2"])
    for minute, member in enumerate(members):
        record.event(minute, member, "start", "initial")
    clock = Clock()
    op = operator(asg, record, clock, Grant(price_cap=1.0))
    assert [(line.status.status, line.action) for line in op.check_all()] == [(SERVING, "watching")]
    assert record.operator_events() == []
    record.store.put(record.layout.result("e1"), b"{}")
    record.store.put(record.layout.result("e2"), b"{}")
    for member in members:
        record.event(29, member, "stop", "done", incarnation="inc-1")  # the agents are done; the group runs
    assert [(line.status.status, line.action) for line in op.check_all()] == [(DONE, "stopped")]
    state = asg.state()
    assert (state.status, state.raw, state.details["desired"]) == ("stopped", "scaled to zero", 0)
    group = asg.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg.node])[
        "AutoScalingGroups"
    ][0]
    assert (group["MinSize"], group["DesiredCapacity"]) == (0, 0)
    # both members had recorded their own stop: the operator notes its stop, it adds no event
    assert record.operator_events() == []
    assert sorted((n["node"], n["what"], n["reason"]) for n in record.notes()) == sorted(
        (m, "stopped", "done") for m in members
    )


def test_aws_group_the_engine_refilled_above_the_cap_is_scaled_to_zero(
    asg: AwsGroupPlane, record: Record
) -> None:
    members = _members(asg)
    record.manifest(["e1"])
    record.event(0, members[0], "start", "restart_after_preemption")
    lines = operator(asg, record, Clock(), Grant(price_cap=0.000001)).check_all()
    assert [(line.status.status, line.action) for line in lines] == [(SERVING, "stopped")]
    assert asg.state().details["desired"] == 0
    stops = record.operator_events()
    assert sorted((e.node, e.kind, e.reason) for e in stops) == [
        (m, "stop", "stop_rule:price_cap") for m in members
    ]
    assert {e.details["group"] for e in stops} == {asg.node}


# --- Azure: a Spot scale set on a loopback ARM API -----------------------------------------------------

VMSS = "evals-gpu"
VMSS_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{VMSS}"
)


class ScaleSet:
    """A Spot scale set whose evicted members are deleted: `evict(k)` takes k of them (and the capacity)."""

    def __init__(self, capacity: int = 2) -> None:
        self.capacity = capacity
        self.members = [f"{VMSS}_{i}" for i in range(capacity)]
        self.next_id = capacity
        self.update_error: dict[str, Any] | None = None
        self.updates: list[int] = []
        self.polls: dict[str, int] = {}
        self.url = ""

    def evict(self, k: int) -> list[str]:
        gone, self.members = self.members[:k], self.members[k:]
        self.capacity -= k
        return gone

    def _set(self, capacity: int) -> None:
        self.updates.append(capacity)
        self.capacity = capacity
        while len(self.members) < capacity:
            self.members.append(f"{VMSS}_{self.next_id}")
            self.next_id += 1
        self.members = self.members[:capacity]

    def _vmss(self) -> dict[str, Any]:
        return {
            "id": VMSS_ID,
            "name": VMSS,
            "location": "eastus",
            "sku": {"name": SKU, "tier": "Standard", "capacity": self.capacity},
            "properties": {"orchestrationMode": "Uniform"},
        }

    def handle(self, r: Request) -> Reply:
        if r.method == "GET" and r.path == VMSS_ID:
            return 200, self._vmss(), {}
        if r.method == "GET" and r.path == f"{VMSS_ID}/virtualMachines":
            assert r.query.get("$expand") == "instanceView"
            vms = [
                {
                    "id": f"{VMSS_ID}/virtualMachines/{m.rsplit('_', 1)[1]}",
                    "name": m,
                    "instanceId": m.rsplit("_", 1)[1],
                    "location": "eastus",
                    "properties": {
                        "instanceView": {"statuses": [{"code": "PowerState/running", "level": "Info"}]}
                    },
                }
                for m in self.members
            ]
            return 200, {"value": vms}, {}
        if r.method == "PATCH" and r.path == VMSS_ID:
            if self.update_error:
                return 409, {"error": self.update_error}, {}
            self._set(int(r.body["sku"]["capacity"]))
            self.polls["update"] = 0
            # ARM answers an update with the resource (200) and the operation to poll
            return 200, self._vmss(), {"Azure-AsyncOperation": f"{ARM}{OPS}/update?api-version=2026-04-01"}
        if r.method == "GET" and r.path.startswith(OPS + "/"):
            name = r.path.rsplit("/", 1)[1]
            self.polls[name] += 1
            status = "InProgress" if self.polls[name] < 2 else "Succeeded"
            return 200, {"name": name, "status": status, "startTime": "2026-12-01T05:00:00Z"}, {}
        if r.method == "GET" and r.path == "/api/retail/prices":
            items = [retail_item(0.1234)]
            return 200, {"BillingCurrency": "USD", "Items": items, "NextPageLink": None, "Count": 1}, {}
        return 404, {"error": {"code": "NotFound", "message": f"no route {r.method} {r.path}"}}, {}


class _Loopback(LoopbackTransport):
    """The loopback transport, leaving the request's own URL as the SDK built it: a long-running
    update ends with a GET of that URL, which the SDK's bearer-token policy allows only over https."""

    def send(self, request: Any, **kwargs: Any) -> Any:
        url = request.url
        try:
            return super().send(request, **kwargs)
        finally:
            request.url = url


@pytest.fixture
def vmss() -> Iterator[tuple[ScaleSet, FakeApi, AzureScaleSetPlane]]:
    state = ScaleSet()
    api = FakeApi(state.handle)
    state.url = api.url
    compute = ComputeManagementClient(
        FakeCredential(), SUB, transport=_Loopback(api.url), polling_interval=0.01
    )
    options = PlaneOptions(poll_s=0.02, providers={"azure": {"resource_group": RG, "subscription": SUB}})
    plane = AzureScaleSetPlane(pool_outputs("azure", VMSS, 2), VMSS, options, compute)
    plane.prices_url = f"{api.url}/api/retail/prices"
    try:
        yield state, api, plane
    finally:
        api.close()


def test_azure_scale_set_with_evicted_members_is_restored_within_the_grant(
    vmss: tuple[ScaleSet, FakeApi, AzureScaleSetPlane], record: Record
) -> None:
    state, _api, plane = vmss
    record.manifest(["e1", "e2", "e3"], done=["e1"])
    for member in state.members:
        record.event(0, member, "start", "initial", heartbeat_s=30)
    [gone] = state.evict(1)
    record.event(20, gone, "notice", "scheduled_event")
    clock = Clock()
    op = operator(plane, record, clock, Grant(price_cap=1.0))
    [line] = op.check_all()
    assert (line.status.status, line.action) == (SERVING, "started")
    assert line.message == "restart_after_preemption at 0.1234 USD/h (api) (1 members)"
    assert state.updates == [2] and len(state.members) == 2
    [start] = record.operator_events()
    assert (start.node, start.kind, start.reason) == (f"{VMSS}_2", "start", "restart_after_preemption")
    assert (start.price_per_hour, start.price_source, start.details["group"]) == (0.1234, "api", VMSS)
    # full again: watched
    clock.advance(60)
    assert [(ln.status.status, ln.action) for ln in op.check_all()] == [(SERVING, "watching")]


def test_azure_scale_set_above_the_cap_is_not_restored_and_says_why_once(
    vmss: tuple[ScaleSet, FakeApi, AzureScaleSetPlane], record: Record
) -> None:
    state, api, plane = vmss
    record.manifest(["e1", "e2"])
    for member in state.members:
        record.event(0, member, "start", "initial", heartbeat_s=30)
    state.evict(2)
    clock = Clock()
    op = operator(plane, record, clock, Grant(price_cap=0.1))
    [line] = op.check_all()
    assert (line.status.status, line.action) == (PREEMPTED, "refused")
    clock.advance(60)
    [line] = op.check_all()  # the refusal is in the journal now: said once, not again
    assert (line.status.status, line.status.reason, line.action) == (
        STOPPED_BY_RULE,
        "stop_rule:price_cap",
        "refused",
    )
    assert state.updates == []
    assert [(n["what"], n["reason"]) for n in record.notes()] == [("refused", "stop_rule:price_cap")]
    assert [r for r in api.requests if r.method != "GET"] == []


def test_azure_scale_set_capacity_error_waits_then_restores(
    vmss: tuple[ScaleSet, FakeApi, AzureScaleSetPlane], record: Record
) -> None:
    state, _api, plane = vmss
    record.manifest(["e1", "e2"])
    for member in state.members:
        record.event(0, member, "start", "initial", heartbeat_s=30)
    state.evict(2)
    state.update_error = {"code": "SkuNotAvailable", "message": "The requested size is not available."}
    clock = Clock()
    op = operator(plane, record, clock)
    assert [ln.action for ln in op.check_all()] == ["capacity"]
    [note] = record.notes()
    assert (note["what"], note["message"].endswith("(SkuNotAvailable)")) == ("capacity_error", True)
    state.update_error = None
    clock.advance(30)
    assert [ln.action for ln in op.check_all()] == ["watching"]  # backing off: 60 s after the first
    clock.advance(30)
    assert [ln.action for ln in op.check_all()] == ["started"]
    assert sorted(e.node for e in record.operator_events()) == [f"{VMSS}_2", f"{VMSS}_3"]


def test_azure_scale_set_of_a_done_run_is_scaled_to_zero_with_a_stop_per_member(
    vmss: tuple[ScaleSet, FakeApi, AzureScaleSetPlane], record: Record
) -> None:
    state, _api, plane = vmss
    record.manifest(["e1"], done=["e1"])
    members = list(state.members)
    for member in members:
        record.event(0, member, "start", "initial", heartbeat_s=30)
    clock = Clock()
    clock.advance(600)  # the agents have been silent longer than the grace
    [line] = operator(plane, record, clock).check_all()
    assert (line.status.status, line.action) == (DONE, "stopped")
    assert state.updates == [0] and state.members == []
    assert sorted((e.node, e.reason) for e in record.operator_events()) == [(m, "done") for m in members]


# --- GCP: a regional managed instance group on a loopback Compute API ---------------------------------

GPROJECT, GREGION, MIG = "evals-prj", "us-central1", "evals-gpu-group"
MIG_PATH = f"/compute/v1/projects/{GPROJECT}/regions/{GREGION}/instanceGroupManagers/{MIG}"


class Mig:
    """A regional MIG whose members run at once; `preempt(k)` leaves k members recreating."""

    def __init__(self, size: int = 2) -> None:
        self.target = size
        self.statuses = ["RUNNING"] * size
        self.resizes: list[int] = []

    def handle(self, r: Request) -> Reply:
        if r.method == "GET" and r.path == MIG_PATH:
            return 200, {"name": MIG, "targetSize": self.target, "region": GREGION}, {}
        if r.method == "POST" and r.path == f"{MIG_PATH}/listManagedInstances":
            instances = [
                {
                    "instance": f"https://www.googleapis.com/compute/v1/projects/{GPROJECT}/zones/"
                    f"us-central1-a/instances/{MIG}-{i}",
                    "instanceStatus": status,
                    "currentAction": "NONE" if status == "RUNNING" else "RECREATING",
                }
                for i, status in enumerate(self.statuses)
            ]
            return 200, {"managedInstances": instances}, {}
        if r.method == "POST" and r.path == f"{MIG_PATH}/resize":
            size = int(r.query["size"])
            self.resizes.append(size)
            self.target = size
            self.statuses = ["RUNNING"] * size
            op = {
                "kind": "compute#operation",
                "name": "op-resize",
                "status": "DONE",
                "operationType": "compute.regionInstanceGroupManagers.resize",
            }
            return 200, op, {}
        return 404, {"error": {"code": 404, "message": f"no route {r.method} {r.path}"}}, {}


@pytest.fixture
def mig() -> Iterator[tuple[Mig, FakeApi, Any]]:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    from spoteval.clouds.groups import GcpMigPlane

    state = Mig()
    api = FakeApi(state.handle)
    groups = compute_v1.RegionInstanceGroupManagersClient(
        client_options=ClientOptions(api_endpoint=api.url),
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
    )
    outputs = StackOutputs.parse(
        {
            "provider": "gcp",
            "region": GREGION,
            "zone": "",
            "node_ids": [MIG],
            "instance_type": "g2-standard-8",
            "market": "spot",
            "bucket_url": "gs://results/evals",
            "run_id": "r1",
            "server_port": 8000,
            "pool_size": 2,
        }
    )
    options = PlaneOptions(configured_price=0.5, poll_s=0.02, providers={"gcp": {"project": GPROJECT}})

    def no_member_price(path: str) -> Any:
        raise AssertionError(f"no member price expected: {path}")

    plane = GcpMigPlane(outputs, MIG, options, groups, no_member_price)
    try:
        yield state, api, plane
    finally:
        api.close()


def test_gcp_mig_recreating_members_is_watched_and_resized_to_zero_when_done(
    mig: tuple[Mig, FakeApi, Any], record: Record
) -> None:
    state, _api, plane = mig
    record.manifest(["e1", "e2"])
    for i in range(2):
        record.event(0, f"{MIG}-{i}", "start", "initial", heartbeat_s=30)
    state.statuses[1] = "STOPPING"  # preempted: the group recreates it
    assert (plane.state().status, plane.state().raw) == ("running", "1 of 2 running")
    clock = Clock()
    op = operator(plane, record, clock)
    assert [(ln.status.status, ln.action) for ln in op.check_all()] == [(SERVING, "watching")]
    assert state.resizes == [] and record.operator_events() == []
    record.store.put(record.layout.result("e1"), b"{}")
    record.store.put(record.layout.result("e2"), b"{}")
    clock.advance(600)
    assert [(ln.status.status, ln.action) for ln in op.check_all()] == [(DONE, "stopped")]
    assert state.resizes == [0]
    assert (plane.state().status, plane.state().raw) == ("stopped", "scaled to zero")
    assert sorted((e.node, e.reason) for e in record.operator_events()) == [(f"{MIG}-0", "done")]


def test_status_of_a_pool_starts_and_stops_nothing(
    mig: tuple[Mig, FakeApi, Any], vmss: tuple[ScaleSet, FakeApi, AzureScaleSetPlane], record: Record
) -> None:
    mig_state, mig_api, mig_plane = mig
    vmss_state, vmss_api, vmss_plane = vmss
    record.manifest(["e1", "e2"])
    vmss_state.evict(2)  # taken, work remains: `run` would restore it; `status` must not
    mig_state.statuses = ["STOPPING", "STOPPING"]
    for plane in (mig_plane, vmss_plane):
        [status] = operator(plane, record, Clock()).status()
        assert status.node == plane.node
    assert mig_state.resizes == [] and vmss_state.updates == []
    assert [
        r.path for r in mig_api.requests if r.method == "POST" and "listManagedInstances" not in r.path
    ] == []
    assert [r for r in vmss_api.requests if r.method != "GET"] == []
    assert record.operator_events() == [] and record.notes() == []
