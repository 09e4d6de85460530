"""One operator at a time: two operators against one run record on moto S3 and moto EC2 (create-only
writes made atomic, as S3's are: tests/atomic_moto.py), a killed operator's lease taken over, a
second `scripts.operate` that only reads, and a finished run's next `--once` that exits at once.

No assertion depends on timing: the operators' decision clocks and the readers' wall clocks are
injected, and where two operators run at once the assertions hold whichever goes first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from scripts.operate import main
from spoteval.clouds import ControlPlane, StackOutputs
from spoteval.grant import Grant
from spoteval.operate import Line, Operator, Timing
from spoteval.operate.lease import HELD, OTHER, OperatorLease, read_objects
from spoteval.record import parse_time, utc_now
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import wait_for
from tests.fake_runpod import FakeRunpod
from tests.faults import start_atomic_moto
from tests.operate_kit import T0, Clock, Record
from tests.test_operate import _runpod_plane, aws_plane, launch_spot, runpod_outputs
from tests.test_operate_lease import Unwritable

TIMING = Timing(interval_s=60, backoff_first_s=60, backoff_max_s=900, stop_timeout_s=5)
TTL = 600.0


class Counted:
    """A control plane that counts its mutating calls (starts and stops) and passes everything on."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plane, name)

    def start(self, timeout_s: float) -> None:
        self.calls.append("start")
        self.plane.start(timeout_s)

    def stop(self, timeout_s: float) -> None:
        self.calls.append("stop")
        self.plane.stop(timeout_s)


def operator(
    holder: str,
    plane: Counted,
    store: Store,
    clock: Callable[[], datetime],
    *,
    wall: Callable[[], datetime] = utc_now,
    said: list[str] | None = None,
) -> Operator:
    """An operator under the run's lease; its monotonic clock stands still, so it renews only when a
    test says so (`tick` after moving it), however slow the machine is."""
    outputs: StackOutputs = plane.outputs
    lease = OperatorLease(
        store, outputs.run_id, holder=holder, ttl_s=TTL, wall=wall, mono=lambda: 0.0, keeper=False
    )
    return Operator(
        outputs,
        {plane.node: plane},
        Grant(price_cap=1.0),
        store,
        timing=TIMING,
        start_timeout_s=5,
        clock=clock,
        sleep=lambda _: None,
        say=(said.append if said is not None else lambda _: None),
        lease=lease,
    )


@pytest.fixture(scope="module")
def moto() -> Iterator[servers.Server]:
    """moto for S3 and EC2 at once, its create-only PUTs atomic (as S3's are)."""
    server = start_atomic_moto()
    server.env = {
        "AWS_ENDPOINT_URL": server.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    yield server
    server.stop()


@pytest.fixture
def aws(moto: servers.Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment pointed at moto, and a fresh bucket's store URL for the run record."""
    for key, value in moto.env.items():
        monkeypatch.setenv(key, value)
    bucket = f"op-{os.urandom(6).hex()}"
    servers.create_s3_bucket(moto, bucket)
    return f"s3://{bucket}/evals"


def _minutes(at: datetime) -> float:
    return (at - T0).total_seconds() / 60


def _taken(node: str, record: Record, clock: Clock) -> None:
    """The provider takes the node: EC2 stops it, its agent saw the notice (a minute ago)."""
    boto3.client("ec2").stop_instances(InstanceIds=[node])
    record.event(_minutes(clock.now) - 1, node, "notice", "preempted")


def _both_at_once(first: Operator, second: Operator) -> dict[str, list[Line]]:
    """Two `--once` runs started at the same moment (a barrier); their lines by holder."""
    gate = threading.Barrier(2)
    lines: dict[str, list[Line]] = {}

    def once(op: Operator) -> None:
        gate.wait()
        assert op.lease is not None
        lines[op.lease.holder] = op.once()

    threads = [threading.Thread(target=once, args=(op,)) for op in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lines


def _taken_spot(store_url: str, done: tuple[str, ...] = ()) -> tuple[str, Record]:
    """A spot instance EC2 stopped, whose record shows a start and then the notice (T0+20 min)."""
    node = launch_spot()
    record = Record(store_url)
    record.manifest(["e1", "e2"], done=done)
    record.taken(node)
    boto3.client("ec2").stop_instances(InstanceIds=[node])
    return node, record


def test_two_operators_started_together_on_one_record_exactly_one_acts_per_check(aws: str) -> None:
    node, record = _taken_spot(aws, done=("e1",))
    clock = Clock()
    a = Counted(aws_plane(node, aws))
    b = Counted(aws_plane(node, aws))
    op_a = operator("op-a", a, record.store, clock)
    op_b = operator("op-b", b, record.store, clock)
    for check in range(1, 4):
        lines = _both_at_once(op_a, op_b)
        assert sorted(a.calls + b.calls) == ["start"] * check  # one start per check, whoever made it
        started = [line for ls in lines.values() for line in ls if line.action == "started"]
        assert len(started) == 1
        others = [line.action for ls in lines.values() for line in ls if line.action != "started"]
        assert others in ([], ["watching"])  # the other read only, or checked after the start
        assert [e.reason for e in record.operator_events()] == ["restart_after_preemption"] * check
        clock.advance(120)
        _taken(node, record, clock)
        clock.advance(60)
    turns = [(o["holder"], o["end"]) for o in read_objects(record.store, "r1")]
    assert len(turns) in range(6, 13) and all(end == "released" for _, end in turns[1::2])
    assert all(end is None for _, end in turns[0::2])  # every turn: taken, then released


def test_while_one_operator_holds_the_lease_another_only_reads_and_says_so_once(aws: str) -> None:
    node, record = _taken_spot(aws)
    clock = Clock()
    holder, reader = Counted(aws_plane(node, aws)), Counted(aws_plane(node, aws))
    said: list[str] = []
    op_a = operator("op-a", holder, record.store, clock)
    op_b = operator("op-b", reader, record.store, clock, said=said)
    assert op_a.lease is not None and op_a.lease.take().kind == HELD  # a long-running operator
    for _ in range(3):
        assert op_b.check_all() == []
        clock.advance(60)
    assert reader.calls == [] and record.operator_events() == []
    assert len(said) == 1 and said[0].startswith("run r1: operator op-a holds the lease (renewed ")
    assert said[0].endswith("this one only reads")
    assert [line.action for line in op_a.check_all()] == ["started"]
    assert holder.calls == ["start"] and reader.calls == []


def test_a_holder_taken_over_while_it_decides_does_not_act(aws: str) -> None:
    """The holder confirms its lease (one HEAD) just before a start: one taken from it stops it."""
    node, record = _taken_spot(aws)
    clock = Clock()
    stale = Counted(aws_plane(node, aws))
    op_a = operator("op-a", stale, record.store, clock)
    assert op_a.lease is not None and op_a.lease.take().kind == HELD
    later = utc_now() + timedelta(seconds=TTL)  # by this reader's clock op-a has been silent its ttl
    taker = OperatorLease(record.store, "r1", holder="op-b", ttl_s=TTL, wall=lambda: later, keeper=False)
    assert taker.take().kind == HELD
    line = op_a.check(node)
    assert (line.action, stale.calls) == ("reading", [])
    assert line.message == "not acting (start): op-b took the operator lease"


def _operate_in_background(outputs: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = ["--outputs", str(outputs), "--interval", "3600", "--lease-ttl", f"{TTL:g}"]
    return subprocess.Popen(
        [sys.executable, "-m", "scripts.operate", *argv],
        cwd=servers.REPO,
        env={**os.environ, **env, "PYTHONPATH": str(servers.REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_a_killed_operators_lease_expires_and_the_next_run_takes_it(
    aws: str, moto: servers.Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = launch_spot()
    record = Record(aws)
    record.manifest(["e1", "e2"], done=["e1"])
    record.event(_minutes(utc_now()) - 5, node, "start", "initial")  # the node serves
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "provider": "aws",
                "region": "us-east-1",
                "zone": "us-east-1b",
                "node_ids": [node],
                "instance_type": "g6.xlarge",
                "market": "spot",
                "bucket_url": aws,
                "run_id": "r1",
                "server_port": 8000,
            }
        )
    )
    first = _operate_in_background(outputs, moto.env)
    seen: list[str] = []
    try:
        assert first.stdout is not None

        def checked() -> bool:
            line = first.stdout.readline() if first.stdout is not None else ""
            seen.append(line)
            return f"{node}: serving; watching" in line or first.poll() is not None

        assert wait_for(checked, timeout=120), seen
        assert first.poll() is None, "".join(seen)
        # a second operator, started by hand while the first holds the lease: one line, nothing done
        assert main(["--outputs", str(outputs), "--once"]) == 0
        [said] = capsys.readouterr().out.splitlines()
        assert said.startswith("run r1: operator operator-") and said.endswith("this one only reads")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # killed: its lease is never released
        first.wait(timeout=60)
    killed = read_objects(record.store, "r1")
    assert {o["holder"] for o in killed} == {killed[0]["holder"]} and all(o["end"] is None for o in killed)
    last = parse_time(killed[-1]["time"])
    boto3.client("ec2").stop_instances(InstanceIds=[node])  # meanwhile the provider took the node
    record.event(_minutes(utc_now()) - 0.5, node, "notice", "preempted")
    plane = Counted(aws_plane(node, aws))
    # by a reader's clock just under the ttl after the killed operator's last renewal: it only reads
    early = operator("op-b", plane, record.store, utc_now, wall=lambda: last + timedelta(seconds=TTL - 1))
    assert early.check_all() == [] and plane.calls == []
    # at the ttl: the next run takes the lease over and acts
    late = operator("op-b", plane, record.store, utc_now, wall=lambda: last + timedelta(seconds=TTL))
    assert [line.action for line in late.once()] == ["started"]
    assert plane.calls == ["start"]
    after = read_objects(record.store, "r1")
    took = after[len(killed)]
    assert (took["holder"], took["took_over"]["holder"], took["took_over"]["reason"]) == (
        "op-b",
        killed[0]["holder"],
        "expired",
    )
    assert (after[-1]["holder"], after[-1]["end"]) == ("op-b", "released")
    assert [(e.kind, e.reason) for e in record.operator_events()] == [("start", "restart_after_preemption")]


# --- the command line, on the fake Runpod API ------------------------------------------------------------


@pytest.fixture
def runpod(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunpod]:
    fake = FakeRunpod(boot_polls=1)
    for key, value in fake.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield fake
    finally:
        fake.close()


def _outputs(tmp_path: Path, runpod: FakeRunpod, store: str) -> str:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(runpod_outputs(runpod, "pod1", bucket_url=store)))
    return str(path)


def test_a_finished_runs_next_once_exits_at_once_without_a_provider_call(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runpod.add_pod("pod1", status="EXITED")
    store = f"file://{tmp_path}/store"
    record = Record(store)
    record.manifest(["e1", "e2"], done=["e1", "e2"])
    record.event(0, "pod1", "start", "initial")
    record.event(10, "pod1", "stop", "done")
    outputs = _outputs(tmp_path, runpod, store)
    assert main(["--outputs", outputs, "--once"]) == 0  # the last check: done, and the pod stopped
    assert capsys.readouterr().out.splitlines()[1].endswith("pod1: done; watching: the run is done")
    [*_, last] = read_objects(record.store, "r1")
    assert last["end"] == "finished"
    calls = len(runpod.calls)
    for argv in (["--outputs", outputs, "--once"], ["--outputs", outputs]):
        assert main(argv) == 0
        [said] = capsys.readouterr().out.splitlines()
        assert said.startswith("run r1 is finished: every episode has its result and every node is settled")
    assert len(runpod.calls) == calls  # no provider call at all
    assert main(["status", "--outputs", outputs]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("operator: the run is finished (operator-")


def test_status_names_the_operator_that_holds_the_lease(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runpod.add_pod("pod1", status="RUNNING")
    store = f"file://{tmp_path}/store"
    record = Record(store)
    record.manifest(["e1"])
    record.event(0, "pod1", "start", "initial")
    holder = OperatorLease(record.store, "r1", holder="op-laptop", keeper=False)
    assert holder.take().kind == HELD
    assert main(["status", "--outputs", _outputs(tmp_path, runpod, store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["operator"]["lease"], doc["operator"]["holder"], doc["operator"]["k"]) == (
        OTHER,
        "op-laptop",
        0,
    )
    assert len(read_objects(record.store, "r1")) == 1  # status writes nothing


def test_a_waiting_operator_takes_over_when_the_holder_lets_go(runpod: FakeRunpod, tmp_path: Path) -> None:
    runpod.add_pod("pod1", status="EXITED")
    record = Record(f"file://{tmp_path}/store")
    record.manifest(["e1", "e2"])
    record.taken("pod1")
    holder = OperatorLease(record.store, "r1", holder="op-a", keeper=False)
    assert holder.take().kind == HELD
    clock = Clock()
    passes: list[float] = []

    def sleep(seconds: float) -> None:
        passes.append(seconds)
        clock.advance(seconds)
        if len(passes) == 2:
            holder.release()  # the first operator stops in order (Ctrl-C, the end of its --once)

    plane = Counted(_runpod_plane(runpod, "pod1"))
    said: list[str] = []
    op = operator("op-b", plane, record.store, clock, said=said)
    op.sleep = sleep
    lines = op.run(max_passes=4)
    assert said[0].startswith("run r1: operator op-a holds the lease") and said[1] == (
        "run r1: op-b took the operator lease"
    )
    assert plane.calls == ["start"] and runpod.actions("start") == ["pod1"]
    assert [line.action for line in lines] == ["watching"]
    turns = [(o["holder"], o["end"]) for o in read_objects(record.store, "r1")]
    assert turns == [("op-a", None), ("op-a", "released"), ("op-b", None), ("op-b", "released")]


def test_a_holder_whose_lease_could_not_be_renewed_does_not_act(runpod: FakeRunpod, tmp_path: Path) -> None:
    runpod.add_pod("pod1", status="EXITED")
    record = Record(f"file://{tmp_path}/store")
    record.manifest(["e1", "e2"])
    record.taken("pod1")
    mono = [0.0]
    cut = Unwritable(record.store)
    lease = OperatorLease(cut, "r1", holder="op-a", ttl_s=TTL, mono=lambda: mono[0], keeper=False)
    plane = Counted(_runpod_plane(runpod, "pod1"))
    op = Operator(
        plane.outputs,
        {plane.node: plane},
        Grant(),
        record.store,
        timing=TIMING,
        clock=Clock(),
        lease=lease,
    )
    assert lease.take().kind == HELD
    cut.refuse = True  # the store stops taking writes: the renewal due now fails
    mono[0] = TTL / 2
    [line] = op.check_all()
    assert (line.action, plane.calls, runpod.actions("start")) == ("reading", [], [])
    assert line.message == (
        "not acting (start): the operator lease could not be renewed in time (the store did not answer)"
    )
    assert len(lease.problems) == 2  # tried before the pass and again before the node's check
