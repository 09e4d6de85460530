"""`python -m scripts.report --stack NAME --provider-events`: the provider's events, read from the stack's
capture (AWS: the EventBridge events in its CloudWatch Logs group, on a moto server), recorded once,
and counted with the agent's own notices without counting a preemption twice."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from scripts import report as report_cli
from spoteval.events.match import reconcile
from spoteval.record import Event, RunLayout, format_time
from spoteval.store import Store
from tests import servers

RUN = "run-ev"
#: moto refuses log events older than 14 days: the run happened an hour ago
T0 = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(microsecond=0)
GROUP = f"/spot-eval/{RUN}/ec2-events"


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def ev(s: float, node: str, kind: str, reason: str | None = None, **details: Any) -> Event:
    return Event(
        time=at(s),
        run_id=RUN,
        node=node,
        kind=kind,
        reason=reason,
        provider="aws",
        region="us-east-1",
        zone="us-east-1b",
        instance_type="g6.xlarge",
        market="spot",
        details=details,
    )


def bridge(s: float, detail_type: str, instance: str, **detail: str) -> dict[str, Any]:
    """An EventBridge event as the stack's rules write it to the Logs group."""
    return {
        "version": "0",
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{detail_type}/{instance}/{s}")),
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": at(s).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance}"],
        "detail": {"instance-id": instance, **detail},
    }


WARNING = "EC2 Spot Instance Interruption Warning"
STATE = "EC2 Instance State-change Notification"
LOGGED = [
    bridge(-600, STATE, "i-boot", state="pending"),
    bridge(0, STATE, "i-a", state="running"),
    bridge(1000, "EC2 Instance Rebalance Recommendation", "i-a"),
    bridge(1200, WARNING, "i-a", **{"instance-action": "stop"}),
    bridge(1320, STATE, "i-a", state="stopped"),  # the warned interruption: not a second event
    bridge(1500, STATE, "i-b", state="stopped"),  # stopped without a warning: a provider stop
    bridge(1600, WARNING, "i-other", **{"instance-action": "terminate"}),  # not this run's node
    bridge(-300, WARNING, "i-boot", **{"instance-action": "terminate"}),  # taken while booting
]
RECORD = [
    # i-a: the agent saw the notice a second after the warning and kept writing until taken
    ev(0, "i-a", "start", "initial"),
    *(ev(s, "i-a", "heartbeat") for s in range(30, 1200, 300)),
    ev(1201, "i-a", "notice", "spot_interruption"),
    ev(1290, "i-a", "heartbeat"),
    # i-b: the agent's last word was a heartbeat; the provider says the instance stopped
    ev(0, "i-b", "start", "initial"),
    ev(1400, "i-b", "heartbeat"),
]


@pytest.fixture
def aws(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> Any:
    servers.moto_reset(moto_server)
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_group(logGroupName=GROUP)
    logs.create_log_stream(logGroupName=GROUP, logStreamName="events")
    ordered = sorted(LOGGED, key=lambda e: e["time"])
    logs.put_log_events(
        logGroupName=GROUP,
        logStreamName="events",
        logEvents=[
            {
                "timestamp": int(datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() * 1000),
                "message": json.dumps(e),
            }
            for e in ordered
        ],
    )
    return logs


def stack_outputs(tmp_path: Path, **over: Any) -> Path:
    outputs: dict[str, Any] = {
        "provider": "aws",
        "region": "us-east-1",
        "zone": "us-east-1b",
        "node_ids": ["i-a", "i-boot"],
        "instance_type": "g6.xlarge",
        "market": "spot",
        "bucket_url": f"file://{tmp_path / 'store'}",
        "run_id": RUN,
        "server_port": 8000,
        "address_kind": "ephemeral",
        "event_capture": {"kind": "cloudwatch_logs", "log_group": GROUP},
    }
    outputs.update(over)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({k: v for k, v in outputs.items() if v is not None}))
    return path


def events_stack(tmp_path: Path) -> list[str]:
    """`--stack aws-events --stacks-dir DIR` with DIR holding that stack: the AWS stack's file."""
    folder = tmp_path / "stacks"
    folder.mkdir(exist_ok=True)
    source = Path(__file__).resolve().parent.parent / "stacks" / "Pulumi.aws-us-east-1.yaml"
    (folder / "Pulumi.aws-events.yaml").write_text(source.read_text())
    return ["--stack", "aws-events", "--stacks-dir", str(folder)]


def write_record(tmp_path: Path) -> Store:
    store = Store(f"file://{tmp_path / 'store'}")
    layout = RunLayout(RUN)
    for i, e in enumerate(RECORD):
        assert store.put_new(layout.event(e.time, e.node, i), e.dumps())
    return store


def provider_events(store: Store) -> dict[str, Event]:
    out: dict[str, Event] = {}
    for key in store.list(RunLayout(RUN).events_prefix):
        if "-provider-" in key:
            out[key] = Event.loads(store.get(key) or b"")[0]
    return out


def test_report_records_the_providers_events_once_and_counts_each_preemption_once(
    aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = write_record(tmp_path)
    argv = [*events_stack(tmp_path), "--outputs", str(stack_outputs(tmp_path)), "--provider-events", "--json"]
    assert report_cli.main(argv) == 0
    first = capsys.readouterr()
    assert first.err == "report: provider events: 3 found, 3 recorded now, 0 already in the record\n"
    recorded = provider_events(store)
    assert sorted((e.node, e.kind, e.reason, format_time(e.time)) for e in recorded.values()) == [
        ("i-a", "preempted", "provider", format_time(at(1200))),
        ("i-b", "stop", "provider", format_time(at(1500))),
        ("i-boot", "preempted", "provider", format_time(at(-300))),
    ]
    by_node = {e.node: e for e in recorded.values()}
    assert by_node["i-a"].details["instance_action"] == "stop"
    assert by_node["i-a"].details["provider_event"] == WARNING
    assert by_node["i-boot"].details["launch_time"] == format_time(at(-600))
    assert by_node["i-b"].details["state"] == "stopped"
    assert {e.details["event_id"] for e in recorded.values()} == {
        LOGGED[3]["id"],
        LOGGED[5]["id"],
        LOGGED[7]["id"],
    }

    assert report_cli.main(argv) == 0
    second = capsys.readouterr()
    assert second.err == "report: provider events: 3 found, 0 recorded now, 3 already in the record\n"
    assert provider_events(store) == recorded
    assert json.loads(second.out) == json.loads(first.out) | {
        "generated": json.loads(second.out)["generated"]
    }

    rep = json.loads(second.out)
    assert rep["preemptions"] == {
        "total": 2,
        "both": 1,
        "agent_only": 0,
        "provider_only": 1,
        "provider_stops": 1,
        "repeated_stops": 0,
    }
    ends = [(a["node"], a["ended_by"], a["end_reason"], a["end"]) for a in rep["allocations"]]
    assert ends == [
        # ended where the agent last wrote, by the provider's preemption (its notice matched)
        ("i-a", "preempted", "provider", format_time(at(1290) + timedelta(microseconds=1))),
        # stopped, not lost: censored for tau
        ("i-b", "stop", "provider", format_time(at(1500))),
        # taken while booting: from its launch to the warning
        ("i-boot", "preempted", "provider", format_time(at(-300))),
    ]
    assert rep["tau"]["preemptions"] == 2
    assert not any("outside any allocation" in p["message"] for p in rep["problems"])
    assert report_cli.main(argv[:-1]) == 0  # the text report: the same ledger, in one line
    text = capsys.readouterr().out
    assert (
        "Preemptions: 2 (agent and provider both saw 1, only the agent 0, only the provider 1); "
        "provider-reported stops: 1 (0 the agent recorded too)\n" in text
    )


def test_a_stack_without_the_capture_output_is_refused_with_one_line(
    aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = write_record(tmp_path)
    before = store.list(RunLayout(RUN).events_prefix)
    path = stack_outputs(tmp_path, event_capture=None)
    assert report_cli.main([*events_stack(tmp_path), "--outputs", str(path), "--provider-events"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "report: --stack aws-events: the outputs have no 'event_capture': this stack keeps no provider "
        "events spot-eval can read (aws)\n"
    )
    assert store.list(RunLayout(RUN).events_prefix) == before


def test_provider_events_need_a_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--store", f"file://{tmp_path}", "--run", RUN, "--provider-events"]
    assert report_cli.main(argv) == 2
    assert (
        capsys.readouterr().err
        == "report: --provider-events reads the stack's event capture: give --stack NAME\n"
    )


def test_a_missing_log_group_is_one_line(
    aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_record(tmp_path)
    path = stack_outputs(tmp_path, event_capture={"kind": "cloudwatch_logs", "log_group": "/spot-eval/none"})
    assert report_cli.main([*events_stack(tmp_path), "--outputs", str(path), "--provider-events"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "report: --provider-events: CloudWatch Logs group /spot-eval/none: ResourceNotFoundException"
    )
    assert err.count("\n") == 1


# --- the matching rule ----------------------------------------------------------------------------


def provider(s: float, node: str, kind: str = "preempted") -> Event:
    return ev(s, node, kind, "provider", observer="provider_events", event_id=f"{node}-{s}")


def test_a_provider_preemption_outside_the_notice_window_is_another_preemption() -> None:
    # AWS: notice 120 s + 60 s slack. 180 s after the notice matches; 181 s does not.
    inside = [ev(0, "n", "start", "initial"), ev(100, "n", "notice", "spot_interruption"), provider(280, "n")]
    outside = [
        ev(0, "n", "start", "initial"),
        ev(100, "n", "notice", "spot_interruption"),
        provider(281, "n"),
    ]
    assert reconcile(inside)[1].total == 1
    ledger = reconcile(outside)[1]
    assert (ledger.total, ledger.both, ledger.agent_only, ledger.provider_only) == (2, 0, 1, 1)
    # a provider time up to 60 s before the agent's notice (clock skew) is the same preemption
    early = [ev(0, "n", "start", "initial"), ev(100, "n", "notice", "sigterm"), provider(40, "n")]
    assert reconcile(early)[1].both == 1
    # another node's notice never matches
    other = [ev(0, "m", "start", "initial"), ev(100, "m", "notice", "spot_interruption"), provider(110, "n")]
    assert reconcile(other)[1].both == 0


def test_a_provider_stop_after_the_agents_stop_is_left_out() -> None:
    events = [ev(0, "n", "start", "initial"), ev(50, "n", "stop", "done"), provider(80, "n", "stop")]
    kept, ledger = reconcile(events)
    assert [(e.kind, e.reason) for e in kept] == [("start", "initial"), ("stop", "done")]
    assert (ledger.provider_stops, ledger.repeated_stops, ledger.total) == (1, 1, 0)


def test_a_sigterm_before_our_own_stop_is_no_sighting_and_a_recorded_preemption_is_kept_once() -> None:
    ours = [ev(0, "n", "start", "initial"), ev(50, "n", "notice", "sigterm"), ev(55, "n", "stop", "user")]
    ledger = reconcile(ours)[1]
    assert (ledger.agent, ledger.total) == (0, 0)
    # a restart measurement's forced preemption, also in the provider's record: one preemption,
    # and the provider's copy does not end a second allocation
    measured = [
        ev(0, "n", "start", "measurement"),
        ev(100, "n", "preempted", "provider", simulated=True),
        provider(101, "n"),
    ]
    kept, ledger = reconcile(measured)
    assert [(e.kind, e.details.get("observer")) for e in kept] == [("start", None), ("preempted", None)]
    assert (ledger.agent, ledger.provider, ledger.both, ledger.total) == (1, 1, 1, 1)
