"""`python -m scripts.operate`: progress lines, `status` that starts nothing, and bad input (one line,
exit 2, nothing started), against the fake Runpod API and moto EC2 through the real command line."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.operate import main
from tests import servers
from tests.fake_runpod import FakeRunpod
from tests.operate_kit import Record
from tests.test_operate import launch_spot, runpod_outputs


@pytest.fixture
def runpod(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunpod]:
    fake = FakeRunpod(boot_polls=1)
    for key, value in fake.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield fake
    finally:
        fake.close()


def _outputs(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _taken_pod(runpod: FakeRunpod, tmp_path: Path) -> tuple[Record, str]:
    runpod.add_pod("pod1", status="EXITED")
    store = f"file://{tmp_path}/store"
    record = Record(store)
    record.manifest(["e1", "e2"])
    record.taken("pod1")
    return record, _outputs(tmp_path, runpod_outputs(runpod, "pod1", bucket_url=store))


MUTATIONS = {"podAction", "createPod", "deletePod"}


def test_status_answers_from_the_provider_and_the_record_and_starts_nothing(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, outputs = _taken_pod(runpod, tmp_path)
    keys = record.keys()
    assert main(["status", "--outputs", outputs]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "pod1: preempted, waiting for capacity; provider: stopped (EXITED); "
        "taken by the provider (notice:preempted); work remains",
        "operator: no operator has taken the lease",
    ]
    assert main(["status", "--outputs", outputs, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(n["node"], n["status"], n["reason"]) for n in doc["nodes"]] == [
        ("pod1", "preempted", "notice:preempted")
    ]
    assert (doc["operator"]["lease"], doc["operator"]["holder"]) == ("free", None)
    assert set(runpod.operations()) == {"getPod"}
    assert not MUTATIONS & set(runpod.operations())
    assert record.keys() == keys


def test_once_starts_the_taken_pod_and_prints_a_line_per_node(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, outputs = _taken_pod(runpod, tmp_path)
    assert main(["--outputs", outputs, "--once", "--poll", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"operating run r1 ({outputs}, runpod): 1 node(s), checks every 60 s (once)"
    assert len(lines) == 2
    assert lines[1].endswith(
        "pod1: preempted, waiting for capacity; started: restart_after_preemption at 0.43 USD/h (api)"
    )
    assert runpod.actions("start") == ["pod1"]
    assert [(e.kind, e.reason) for e in record.operator_events()] == [("start", "restart_after_preemption")]


def _fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str, printed: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    answer = tmp_path / "pulumi-answer.json"
    answer.write_text(printed)
    fake.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "stack output --json --stack {stack}" ] || {{ echo "unexpected: $*" >&2; exit 3; }}\n'
        f"cat {answer}\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    return stacks


def test_the_stacks_grant_refuses_a_start_above_its_cap_and_says_how_to_widen_it(
    runpod: FakeRunpod, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record, outputs = _taken_pod(runpod, tmp_path)
    stacks = _fake_pulumi(tmp_path, monkeypatch, "gpu-runpod", Path(outputs).read_text())
    (stacks / "Pulumi.gpu-runpod.yaml").write_text("config:\n  spot-eval:grant:\n    price_cap: 0.1\n")
    args = ["--stack", "gpu-runpod", "--stacks-dir", str(stacks), "--once", "--poll", "0.01"]
    assert main(args) == 0
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith(
        "pod1: preempted, waiting for capacity; refused: price_cap: the price now, 0.43 USD per hour, "
        "is above the grant's price_cap 0.1 (raise spot-eval:grant.price_cap in the stack file, or wait "
        "for the price to fall (the operator keeps checking))"
    )
    assert "pod1: stopped by a rule (stop_rule:price_cap); refused:" in out[3]
    assert runpod.actions("start") == []
    assert [(n["what"], n["reason"]) for n in record.notes()] == [("refused", "stop_rule:price_cap")]


def test_a_stack_without_outputs_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = _fake_pulumi(tmp_path, monkeypatch, "never-deployed", "{}\n")
    (stacks / "Pulumi.never-deployed.yaml").write_text("config:\n  spot-eval:provider: runpod\n")
    assert main(["--stack", "never-deployed", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert (
        err == "operate: --stack never-deployed: the stack has no outputs (deploy it with pulumi up first)\n"
    )


def test_outputs_missing_a_key_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _outputs(tmp_path, {"provider": "runpod", "region": "EU-RO-1", "node_ids": ["pod1"]})
    assert main(["status", "--outputs", path]) == 2
    err = capsys.readouterr().err
    assert err == f"operate: {path}.market: missing\n"


def test_credentials_that_cannot_read_the_node_are_one_line_exit_2_and_nothing_started(
    runpod: FakeRunpod, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record, outputs = _taken_pod(runpod, tmp_path)
    monkeypatch.setenv("RUNPOD_API_KEY", "not-the-key")
    assert main(["--outputs", outputs, "--once"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "operate: node pod1: cannot read its state: runpod pod pod1: HTTP 401: "
        "the API key is refused (RUNPOD_API_KEY)\n"
    )
    assert runpod.calls == [] and runpod.unauthorized == 1
    assert record.operator_events() == [] and record.notes() == []


def test_an_aws_node_the_credentials_cannot_find_is_exit_2(
    moto_server: servers.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    launch_spot()
    raw = {
        "provider": "aws",
        "region": "us-east-1",
        "node_ids": ["i-0123456789abcdef0"],
        "instance_type": "g6.xlarge",
        "market": "spot",
        "bucket_url": f"file://{tmp_path}/store",
        "run_id": "r1",
        "server_port": 8000,
    }
    assert main(["--outputs", _outputs(tmp_path, raw), "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("operate: node i-0123456789abcdef0: cannot read its state: aws describe_instances")
    assert "InvalidInstanceID" in err and err.count("\n") == 1


def test_the_loop_ends_with_exit_1_when_only_a_wider_grant_would_start_the_node(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, outputs = _taken_pod(runpod, tmp_path)  # 20 min at 0.5 per hour spent
    grant = tmp_path / "grant.yaml"
    grant.write_text("budget: 0.01\n")
    assert main(["--outputs", outputs, "--grant", str(grant), "--interval", "0.01", "--poll", "0.01"]) == 1
    captured = capsys.readouterr()
    checks = [line for line in captured.out.splitlines() if "pod1:" in line]
    assert [line.split("] ", 1)[1].split(";")[0] for line in checks] == [
        "pod1: preempted, waiting for capacity",
        "pod1: stopped by a rule (stop_rule:budget)",
    ]
    assert captured.err == "operate: the grant refuses to start pod1: widen it and run again\n"
    assert [(n["what"], n["reason"]) for n in record.notes()] == [("refused", "stop_rule:budget")]
    assert runpod.actions("start") == []


def test_a_running_node_spot_eval_never_started_is_not_called_serving(
    runpod: FakeRunpod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The provider says running, the record has no start of it: not serving, and left alone."""
    runpod.add_pod("pod1", status="RUNNING")
    store = f"file://{tmp_path}/store"
    Record(store).manifest(["e1", "e2"])
    outputs = _outputs(tmp_path, runpod_outputs(runpod, "pod1", bucket_url=store))
    assert main(["status", "--outputs", outputs]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "pod1: running, not started by spot-eval; provider: running (RUNNING); the provider says RUNNING, "
        "but the record has no start of it: spot-eval did not start it (or its agent has not written "
        "yet); left alone",
        "operator: no operator has taken the lease",
    ]
    assert main(["status", "--outputs", outputs, "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert node["status"] == "unrecorded" and node["label"] != "serving"
    assert main(["--outputs", outputs, "--once"]) == 0
    assert not MUTATIONS & set(runpod.operations())  # nothing stopped or started
