"""Harness shards through the node agent: outcomes by exit code, and a run of the shipped inspect task."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from spoteval.agent import episodes as ep
from spoteval.agent.__main__ import main
from spoteval.harness.shards import episode_command, plan
from spoteval.harness.tasks import shipped
from spoteval.manifest import ManifestEntry, dump_manifest
from spoteval.record import utc_now
from spoteval.scores import task_scores
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    agent_config,
    read_record,
    start_agent,
    write_config,
)


def _ended(tmp_path: Path, code: int | None, spawn_error: str | None = None) -> ep.Ended:
    log = tmp_path / "e.log"
    log.write_text("harness_error: inspect: PrerequisiteError: Task named 'nope' not found.\n")
    run = ep.Running("e1", 1, utc_now(), time.monotonic(), str(tmp_path / "out.json"), str(log), 0.0)
    run.returncode, run.spawn_error = code, spawn_error
    return ep.classify(run, 60.0)


def test_exit_codes_tell_a_harness_error_from_a_model_failure(tmp_path: Path) -> None:
    assert _ended(tmp_path, 3).outcome == "harness_error"
    assert _ended(tmp_path, 3).error == (
        "exited with 3: harness_error: inspect: PrerequisiteError: Task named 'nope' not found."
    )
    assert _ended(tmp_path, 2).outcome == "harness_error"
    assert _ended(tmp_path, 127, spawn_error="cannot start episode command 'nope'").outcome == "harness_error"
    assert _ended(tmp_path, 1).outcome == "model_failure"
    assert _ended(tmp_path, 0).outcome == "model_failure"  # exit 0 without a result file
    assert ep.openai_base_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"


@pytest.mark.slow
def test_the_agent_runs_inspect_shards_and_counts_a_harness_error_apart(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    block, samples = shipped("inspect")
    shards = plan(replace(block, episode_size=5), samples)
    bad = ManifestEntry("bad-0001", {"harness": "inspect", "task": block.task, "samples": ["no/such"]})
    entries = [*shards.entries, bad]
    command = episode_command(block, sys.executable)  # the checkout's task, by its absolute path
    config = agent_config(
        file_target.url, file_target.options, "r1", tmp_path, command=command, timeout_s=600
    )
    path = write_config(tmp_path / "agent.json", config)
    manifest = tmp_path / "m.jsonl"
    manifest.write_bytes(dump_manifest(entries))
    assert main(["manifest", "--config", path, str(manifest)]) == 0
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert agent.wait(600) == 0, agent.stderr()
    record = read_record(Store(file_target.url, file_target.options), "r1")
    assert {e: r.outcome for e, r in record.results.items()} == {
        "spoteval_tiny-0001": "completed",
        "spoteval_tiny-0002": "completed",
        "bad-0001": "harness_error",
    }
    assert record.outcomes("bad-0001") == ["harness_error", "harness_error"]  # max_attempts 2
    error = record.results["bad-0001"].error or ""
    assert error.startswith("exited with 3: ") and "PrerequisiteError: No matches" in error
    results = [{"episode_id": e, "outcome": r.outcome, "output": r.output} for e, r in record.results.items()]
    (scores,) = task_scores(results, {e.id: e.params for e in entries})
    assert (scores.samples, scores.shards, scores.harness_errors, scores.model_failures) == (10, 2, 1, 0)
    assert (scores.numeric[0].name, scores.numeric[0].mean) == ("exact", 0.6)


def test_the_drill_runs_a_harness_in_shards_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    from spoteval.drill.bundled import prepare
    from spoteval.drill.config import DrillConfig, DrillError

    cfg = DrillConfig(out=tmp_path / "out", harness="inspect", concurrency=3)
    cfg.check()
    prepared = prepare(cfg, tmp_path)
    command = prepared.command
    assert command[:5] == ("{python}", "-m", "spoteval.harness", "run", "--harness")
    assert "{openai_base_url}" not in command and "{model_url}" in command
    assert command[command.index("--task") + 1] == "eval/inspect_tiny.py@spoteval_tiny"
    assert [e.id for e in prepared.entries] == [
        "spoteval_tiny-0001",
        "spoteval_tiny-0002",
        "spoteval_tiny-0003",
    ]
    assert [len(e.params["samples"]) for e in prepared.entries] == [4, 4, 2]
    assert "eval/inspect_tiny.py" in prepared.bundle.files and prepared.eval_env == {"workdir": "eval"}
    assert not (tmp_path / "out").exists()  # nothing written before the drill starts
    with pytest.raises(DrillError, match=r"^--harness 'helm' is not one of inspect, lm-eval$"):
        DrillConfig(out=tmp_path, harness="helm").check()
    with pytest.raises(DrillError, match=r"^--harness runs a task in shards: give no --eval-command"):
        DrillConfig(out=tmp_path, harness="lm-eval", eval_command=("x", "{episode_id}", "{output}")).check()
