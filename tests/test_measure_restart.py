"""measure_restart end to end against moto server (EC2 + S3 on loopback) and the stand-in model server.

A persistent spot instance is declared in moto; `ModelServerOnNode` runs the stand-in model server
on loopback and makes it answer only a set delay after it sees the moto instance boot (running
with a new address, or running again after stopped), as a model server on the node would.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import boto3
import pytest
from mypy_boto3_ec2.client import EC2Client

from scripts.measure_restart import main, parser
from spoteval import standin
from spoteval.measure import Options
from spoteval.record import Event, RunLayout, utc_now
from spoteval.store import Store
from tests import servers

ZONE = "us-east-1a"
ITYPE: Final = "g6.xlarge"
RUN_ID = "measure1"
BOOT_DELAY = 0.6


@dataclass
class Node:
    ec2: EC2Client
    instance_id: str
    bucket: str
    outputs: Path
    store: Store

    def state(self) -> str:
        reply = self.ec2.describe_instances(InstanceIds=[self.instance_id])
        return reply["Reservations"][0]["Instances"][0]["State"]["Name"]

    def public_ip(self) -> str | None:
        reply = self.ec2.describe_instances(InstanceIds=[self.instance_id])
        return reply["Reservations"][0]["Instances"][0].get("PublicIpAddress")

    def events(self) -> list[Event]:
        layout = RunLayout(RUN_ID)
        out = []
        for key in self.store.list(layout.events_prefix):
            data = self.store.get(key)
            assert data is not None
            event, problems = Event.loads(data)
            assert problems == [], problems
            out.append(event)
        return sorted(out, key=lambda e: e.time)


class ModelServerOnNode:
    """The stand-in model server, answering only while the moto instance runs, `delay` s after each boot."""

    def __init__(self, node: Node, delay: float, on_boot: Any = None) -> None:
        self.node = node
        self.delay = delay
        self.on_boot = on_boot
        self.server = standin.serve("127.0.0.1", 0)
        self.url = self.server.base_url
        self.boots: list[float] = []
        self._stop = threading.Event()
        self._ip = node.public_ip()
        self._seen_stopped = False
        self.server.ready_at = 0.0 if node.state() == "running" else float("inf")
        self._threads = [
            threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def never_ready(self) -> None:
        self.delay = float("inf")
        self.server.ready_at = float("inf")

    def _watch(self) -> None:
        ec2 = boto3.client("ec2")
        while not self._stop.is_set():
            reply = ec2.describe_instances(InstanceIds=[self.node.instance_id])
            instance = reply["Reservations"][0]["Instances"][0]
            if instance["State"]["Name"] != "running":
                self._seen_stopped = True
                self.server.ready_at = float("inf")
            else:
                ip = instance.get("PublicIpAddress")
                if self._seen_stopped or ip != self._ip:
                    self._seen_stopped, self._ip = False, ip
                    if self.on_boot is not None:  # before the model server answers
                        self.on_boot()
                    now = time.monotonic()
                    self.boots.append(now)
                    self.server.ready_at = now + self.delay
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def aws_env(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> servers.Server:
    """The standard environment pointing boto3 and obstore at moto, as ops' shell would at AWS."""
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


def make_node(tmp_path: Path, moto: servers.Server, *, state: str = "running") -> Node:
    ec2 = boto3.client("ec2")
    reply = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType=ITYPE,
        Placement={"AvailabilityZone": ZONE},
        InstanceMarketOptions={
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "persistent", "InstanceInterruptionBehavior": "stop"},
        },
    )
    instance_id = reply["Instances"][0]["InstanceId"]
    bucket = f"t{uuid.uuid4().hex[:12]}"
    servers.create_s3_bucket(moto, bucket)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "provider": "aws",
                "region": "us-east-1",
                "zone": ZONE,
                "node_ids": [instance_id],
                "instance_type": ITYPE,
                "market": "spot",
                "bucket_url": f"s3://{bucket}/evals",
                "run_id": RUN_ID,
                "server_port": 8000,
                "address_kind": "public",
            }
        )
    )
    node = Node(
        ec2, instance_id, bucket, outputs, Store(f"s3://{bucket}/evals", servers.s3_store_options(moto))
    )
    deadline = time.monotonic() + 10
    while node.state() != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    if state == "stopped":
        ec2.stop_instances(InstanceIds=[instance_id])
    return node


@pytest.fixture
def node(tmp_path: Path, aws_env: servers.Server) -> Node:
    return make_node(tmp_path, aws_env)


@pytest.fixture
def model_server(node: Node) -> Iterator[ModelServerOnNode]:
    server = ModelServerOnNode(node, BOOT_DELAY)
    try:
        yield server
    finally:
        server.close()


def base_args(node: Node, server: ModelServerOnNode, *extra: str) -> list[str]:
    return ["--outputs", str(node.outputs), "--health-url", server.url, "--poll", "0.05", *extra]


def kinds(events: list[Event]) -> list[tuple[str, str | None]]:
    return [(e.kind, e.reason) for e in events]


# --- the plan -----------------------------------------------------------------------------------


def test_without_yes_the_plan_is_printed_and_nothing_changes(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    ip = node.public_ip()
    assert main(base_args(node, model_server, "--cycles", "4")) == 0
    out = capsys.readouterr().out
    assert node.instance_id in out
    assert "the most it can cost" in out
    assert "1e-05 USD/h (api)" in out
    assert node.state() == "running"
    assert node.public_ip() == ip
    assert node.store.list("") == []  # not even an event written


def test_plan_as_json_names_node_price_and_the_most_it_can_cost(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    args = base_args(node, model_server, "--cycles", "2", "--json", "--start-timeout", "3600")
    assert main([*args, "--stop-timeout", "1800", "--serve-timeout", "1800"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["changed"] is False
    body = plan["plan"]
    assert body["node"] == node.instance_id
    assert body["price_now"]["source"] == "api"
    assert body["max_billed_hours"] == pytest.approx(2 * 2.0)  # (3600 + 1800 + 1800) s per cycle
    assert body["most_it_can_cost"] == pytest.approx(4.0 * 0.00001)
    assert node.state() == "running"


def test_a_stopped_node_stays_stopped_without_yes(tmp_path: Path, aws_env: servers.Server) -> None:
    stopped = make_node(tmp_path, aws_env, state="stopped")
    assert main(["--outputs", str(stopped.outputs), "--health-url", "http://127.0.0.1:9"]) == 0
    assert stopped.state() == "stopped"


# --- measuring ----------------------------------------------------------------------------------


def test_stop_start_cycles_measure_each_phase_and_record_every_start_and_stop(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first_ip = node.public_ip()
    png = tmp_path / "phases.png"
    assert main(base_args(node, model_server, "--cycles", "2", "--yes", "--json", "--plot", str(png))) == 0
    report = json.loads(capsys.readouterr().out)

    assert report["outcome"] == "completed"
    assert [c["cycle"] for c in report["cycles"]] == [1, 2]
    for cycle in report["cycles"]:
        phases = cycle["phases"]
        assert list(phases) == ["stop", "price_check", "start", "serve", "first_token"]
        # The model server answers BOOT_DELAY after the boot: that is what `serve` measures.
        assert BOOT_DELAY - 0.2 <= phases["serve"] <= BOOT_DELAY + 2.0
        assert cycle["s_wait_s"] == pytest.approx(phases["start"], abs=0.002)
        assert cycle["s_boot_s"] == pytest.approx(phases["serve"] + phases["first_token"], abs=0.002)
        assert cycle["total_s"] == pytest.approx(cycle["s_wait_s"] + cycle["s_boot_s"], abs=0.002)
        assert cycle["price"]["source"] == "api"
        assert cycle["price"]["per_hour"] == pytest.approx(0.00001)
    summary = report["summary"]
    totals = [c["total_s"] for c in report["cycles"]]
    assert summary["total_s"] == {
        "median": pytest.approx(sum(totals) / 2, abs=0.002),
        "min": min(totals),
        "max": max(totals),
    }
    assert set(summary) >= {"s_wait_s", "s_boot_s", "phases"}
    assert report["workload"]["restart"]["boot_minutes"] == pytest.approx(
        summary["s_boot_s"]["median"] / 60, abs=1e-3
    )
    assert report["price"]["source"] == "api"
    boot_hours = sum(c["s_boot_s"] for c in report["cycles"]) / 3600
    assert report["price"]["billed_estimate"] == pytest.approx(boot_hours * 0.00001, rel=1e-2)
    assert len(model_server.boots) == 2

    # moto gives the instance a new public IPv4 on every start, as AWS does.
    changes = report["address_changed"]
    assert [c["cycle"] for c in changes] == [1, 2]
    assert changes[0]["from"] == first_ip
    assert changes[1]["from"] == changes[0]["to"] != first_ip

    # Left stopped (the default), and the record tells the whole story.
    assert node.state() == "stopped"
    events = node.events()
    assert kinds(events) == [
        ("stop", "measurement"),
        ("start", "measurement"),
        ("heartbeat", None),
        ("stop", "measurement"),
        ("start", "measurement"),
        ("heartbeat", None),
        ("stop", "measurement"),
    ]
    for e in events:
        assert e.node == node.instance_id
        assert e.provider == "aws" and e.zone == ZONE and e.market == "spot"
    for start in (e for e in events if e.kind == "start"):
        assert start.price_per_hour == pytest.approx(0.00001)
        assert start.price_source == "api"
        assert start.currency == "USD"
    beats = [e for e in events if e.kind == "heartbeat"]
    assert beats[0].details["address_changed"] is True
    assert beats[0].details["address_before"] == first_ip
    assert beats[1].details["measured"]["serve"] == report["cycles"][1]["phases"]["serve"]
    assert events[-1].details["leave"] == "stopped"
    assert events[-1].details["outcome"] == "completed"

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readable_table_shows_phases_and_the_workload_numbers(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(base_args(node, model_server, "--cycles", "1", "--yes", "--leave", "running")) == 0
    out = capsys.readouterr().out
    for word in ("Restart cost S", "S_wait", "S_boot", "median", "serve", "first_token", "wait_minutes"):
        assert word in out
    assert node.state() == "running"  # --leave running
    assert kinds(node.events())[-1] == ("heartbeat", None)


def test_a_stopped_node_is_started_and_measured_without_a_stop_phase(
    tmp_path: Path, aws_env: servers.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = make_node(tmp_path, aws_env, state="stopped")
    server = ModelServerOnNode(stopped, BOOT_DELAY)
    try:
        assert main(base_args(stopped, server, "--cycles", "1", "--yes", "--json")) == 0
    finally:
        server.close()
    [cycle] = json.loads(capsys.readouterr().out)["cycles"]
    assert "stop" not in cycle["phases"]
    assert cycle["phases"]["serve"] >= BOOT_DELAY - 0.2
    assert kinds(stopped.events()) == [("start", "measurement"), ("heartbeat", None), ("stop", "measurement")]


def test_price_above_the_cap_refuses_the_start_and_records_stop_rule_price_cap(
    node: Node, model_server: ModelServerOnNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grant = tmp_path / "grant.yaml"
    grant.write_text("price_cap: 0.000001\ncurrency: USD\n")
    code = main(base_args(node, model_server, "--cycles", "2", "--yes", "--grant", str(grant)))
    assert code == 1
    err = capsys.readouterr().err
    assert "price_cap" in err
    assert node.state() == "stopped"  # stopped by the cycle, never started again
    time.sleep(0.2)
    assert node.state() == "stopped"
    events = node.events()
    assert kinds(events) == [("stop", "measurement"), ("stop", "stop_rule:price_cap")]
    refusal = events[-1]
    assert refusal.price_per_hour == pytest.approx(0.00001)
    assert refusal.price_source == "api"
    assert refusal.details["refused"] == "start"
    assert model_server.boots == []


def test_budget_too_small_for_a_cycle_refuses_with_stop_rule_budget(
    node: Node, model_server: ModelServerOnNode, tmp_path: Path
) -> None:
    grant = tmp_path / "grant.json"
    grant.write_text(json.dumps({"grant": {"budget": 0.00001}}))  # < 1 h at 0.00001/h per cycle bound
    assert main(base_args(node, model_server, "--yes", "--grant", str(grant))) == 1
    assert node.state() == "stopped"
    assert kinds(node.events())[-1] == ("stop", "stop_rule:budget")


def _another_node_spent(node: Node, per_hour: float, hours: float) -> None:
    """Write, as another node of the same run would, a start `hours` ago and a stop now."""
    now = utc_now()
    for seq, (kind, reason, when) in enumerate(
        (("start", "initial", now - timedelta(hours=hours)), ("stop", "done", now)), start=1
    ):
        event = Event(
            time=when,
            run_id=RUN_ID,
            node="i-another",
            kind=kind,
            reason=reason,
            provider="aws",
            region="us-east-1",
            instance_type=ITYPE,
            market="spot",
            price_per_hour=per_hour,
            currency="USD",
            price_source="api",
        )
        assert node.store.put_new(RunLayout(RUN_ID).event(when, event.node, seq), event.dumps())


def test_the_budget_is_checked_again_before_the_second_start(
    node: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the first start fits the budget; while its cycle runs, another node of the run spends more than
    # is left, and the second start is refused from the record as it stands then
    server = ModelServerOnNode(node, BOOT_DELAY, on_boot=lambda: _another_node_spent(node, 1.0, 1.0))
    grant = tmp_path / "grant.yaml"
    grant.write_text("budget: 0.5\ncurrency: USD\n")
    try:
        code = main(base_args(node, server, "--cycles", "2", "--yes", "--grant", str(grant)))
    finally:
        server.close()
    assert code == 1
    assert "budget" in capsys.readouterr().err
    assert node.state() == "stopped"
    assert len(server.boots) == 1
    mine = [e for e in node.events() if e.node == node.instance_id and e.kind in ("start", "stop")]
    assert kinds(mine) == [
        ("stop", "measurement"),
        ("start", "measurement"),
        ("stop", "measurement"),
        ("stop", "stop_rule:budget"),
    ]
    assert [e.details.get("cycle") for e in mine] == [1, 1, 2, 2]
    assert mine[-1].details["refused"] == "start"


def test_model_server_that_never_answers_fails_and_leaves_the_node_running_when_asked(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    model_server.never_ready()
    args = base_args(node, model_server, "--yes", "--leave", "running", "--serve-timeout", "0.5", "--json")
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "failed"
    assert "/v1/models" in report["error"]
    assert report["final_state"] == "running"
    assert node.state() == "running"
    last = node.events()[-1]
    assert (last.kind, last.details["outcome"]) == ("heartbeat", "failed")


def test_ctrl_c_mid_cycle_leaves_the_node_stopped_and_records_it(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    timers: list[threading.Timer] = []

    def ctrl_c_while_the_model_server_loads() -> None:
        timers.append(threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)))
        timers[-1].start()

    server = ModelServerOnNode(node, float("inf"), on_boot=ctrl_c_while_the_model_server_loads)
    try:
        code = main(base_args(node, server, "--yes", "--cycles", "3"))
    finally:
        server.close()
        for t in timers:
            t.cancel()
    assert code == 130
    assert "interrupted during serve (waiting for the model server) of cycle 1" in capsys.readouterr().err
    assert node.state() == "stopped"
    events = node.events()
    assert kinds(events) == [("stop", "measurement"), ("start", "measurement"), ("stop", "user")]
    assert events[-1].details["outcome"] == "interrupted"
    assert events[-1].details["leave"] == "stopped"


def test_wait_ready_waits_for_the_agents_ready_event_in_the_record(
    node: Node, aws_env: servers.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    agent_store = Store(f"s3://{node.bucket}/evals", servers.s3_store_options(aws_env))

    def agent_reports_ready() -> None:
        def later() -> None:
            time.sleep(BOOT_DELAY + 0.5)
            event = Event(
                time=utc_now(),
                run_id=RUN_ID,
                node=node.instance_id,
                kind="ready",
                details={"phases": {"boot_s": 12.0, "weights_s": 30.5}},
            )
            agent_store.put_new(RunLayout(RUN_ID).event(event.time, event.node, 1), event.dumps())

        threading.Thread(target=later, daemon=True).start()

    server = ModelServerOnNode(node, BOOT_DELAY, on_boot=agent_reports_ready)
    try:
        args = base_args(
            node, server, "--yes", "--json", "--cycles", "1", "--wait-ready", "--ready-timeout", "20"
        )
        assert main(args) == 0
    finally:
        server.close()
    [cycle] = json.loads(capsys.readouterr().out)["cycles"]
    assert cycle["agent_ready"] == {"phases": {"boot_s": 12.0, "weights_s": 30.5}}
    assert 0.0 <= cycle["phases"]["agent_ready"] <= 5.0
    assert cycle["s_boot_s"] == pytest.approx(
        cycle["phases"]["serve"] + cycle["phases"]["first_token"] + cycle["phases"]["agent_ready"], abs=0.002
    )


def test_preempt_mode_starts_the_fis_experiment_and_records_preempted(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    fis = boto3.client("fis")
    template = fis.create_experiment_template(
        clientToken=uuid.uuid4().hex,
        description="spot interruption",
        roleArn="arn:aws:iam::123456789012:role/fis",
        stopConditions=[{"source": "none"}],
        targets={
            "spot": {
                "resourceType": "aws:ec2:spot-instance",
                "resourceArns": [f"arn:aws:ec2:us-east-1:123456789012:instance/{node.instance_id}"],
                "selectionMode": "ALL",
            }
        },
        actions={
            "interrupt": {
                "actionId": "aws:ec2:send-spot-instance-interruptions",
                "parameters": {"durationBeforeInterruption": "PT2M"},
                "targets": {"SpotInstances": "spot"},
            }
        },
    )["experimentTemplate"]["id"]
    before = {e["id"] for e in fis.list_experiments()["experiments"]}
    done = threading.Event()

    def interrupt_when_the_experiment_starts() -> None:
        # moto records FIS experiments but does not run them: stop the instance as FIS would.
        while not done.is_set():
            if {e["id"] for e in fis.list_experiments()["experiments"]} - before:
                node.ec2.stop_instances(InstanceIds=[node.instance_id])
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=interrupt_when_the_experiment_starts, daemon=True)
    watcher.start()
    try:
        args = base_args(
            node,
            model_server,
            "--yes",
            "--json",
            "--cycles",
            "1",
            "--mode",
            "preempt",
            "--fis-template",
            template,
            "--stop-timeout",
            "10",
        )
        assert main(args) == 0
    finally:
        done.set()
        watcher.join(timeout=5)
    [cycle] = json.loads(capsys.readouterr().out)["cycles"]
    assert "preempt" in cycle["phases"] and "stop" not in cycle["phases"]
    events = node.events()
    assert kinds(events)[:3] == [("preempted", "provider"), ("start", "measurement"), ("heartbeat", None)]
    assert events[0].details["method"].startswith("fis:")


# --- bad input ----------------------------------------------------------------------------------


def test_region_outside_the_grant_is_refused_before_anything_happens(
    node: Node, model_server: ModelServerOnNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grant = tmp_path / "grant.yaml"
    grant.write_text("regions: [eu-west-1]\n")
    assert main(base_args(node, model_server, "--yes", "--grant", str(grant))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outputs.region" in err[0] and "us-east-1" in err[0]
    assert node.state() == "running"
    assert node.store.list("") == []


def test_preempt_on_aws_without_a_fis_template_is_bad_input(
    node: Node, model_server: ModelServerOnNode, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(base_args(node, model_server, "--yes", "--mode", "preempt")) == 2
    assert "--fis-template" in capsys.readouterr().err
    assert node.state() == "running"


def test_outputs_missing_a_key_name_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({"provider": "aws", "region": "us-east-1", "node_ids": ["i-1"]}))
    assert main(["--outputs", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("measure_restart: ") and str(path) in err and "missing" in err


def test_stack_reads_pulumi_outputs_and_the_stacks_grant(
    node: Node,
    model_server: ModelServerOnNode,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A `pulumi` on PATH that prints the stack's outputs, as `pulumi stack output --json` does.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "stack output --json --stack gpu-aws" ] || {{ echo "unexpected: $*" >&2; exit 3; }}\n'
        f"cat {node.outputs}\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.gpu-aws.yaml").write_text(
        "config:\n  aws:region: us-east-1\n  spot-eval:grant:\n    price_cap: 0.5\n    budget: 20\n"
        "  spot-eval:workload:\n    prices: {spot: 0.9, on_demand: 2.5}\n"
        "  spot-eval:aws:\n    vpc_cidr: 10.42.0.0/16\n"
    )
    args = ["--stack", "gpu-aws", "--stacks-dir", str(stacks), "--health-url", model_server.url, "--json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["node"] == node.instance_id
    assert plan["grant"]["price_cap"] == 0.5
    assert plan["budget_left"] == pytest.approx(20.0)
    assert node.state() == "running"
    inputs = Options(**vars(parser().parse_args(args))).inputs()
    assert inputs.configured_price == 0.9  # the workload's spot price: used when no API gives one
    assert inputs.provider_block == {"vpc_cidr": "10.42.0.0/16"}


def test_stack_without_pulumi_on_path_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["--stack", "aws-us-east-1"]) == 2
    assert capsys.readouterr().err == (
        "measure_restart: --stack aws-us-east-1: the pulumi CLI is not on PATH "
        "(or pass the outputs with --outputs FILE.json)\n"
    )
