"""The run report's deadline: the stack's spot policy's answer from the record, as the operator's."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scripts import report as report_cli
from spoteval.record import Attempt
from spoteval.report import analyse, load_run, render, report_json
from spoteval.report.deadline import with_deadline
from tests.operate_kit import T0, Record

# 3 episodes of an hour on one slot, B = 6 min, deadline 4 h (as the operator's test)
RAW: dict[str, Any] = {
    "episodes": 3,
    "episode_minutes": 60,
    "concurrency": 1,
    "lifetime_hours": 1,
    "restart": {"wait_minutes": 10, "boot_minutes": 6},
    "prices": {"spot": 0.5, "on_demand": 1.5},
    "deadline_hours": 4,
    "deadline_policy": "uniform_progress",
}


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(f"file://{tmp_path}/store")


def result(record: Record, episode: str, minutes: float) -> None:
    ended = T0 + timedelta(minutes=minutes)
    attempt = Attempt(
        episode, "completed", 1, "gpu-1", ended - timedelta(hours=1), ended, output={"score": 1}
    )
    record.store.put(record.layout.result(episode), attempt.dumps(as_result=True))
    record.store.put(record.layout.attempt(episode, 1), attempt.dumps())


def test_a_taken_node_behind_the_pace_is_told_to_go_on_demand(record: Record) -> None:
    record.manifest(["e1", "e2", "e3"])
    record.taken("gpu-1")  # start at T0, notice at T0 + 20 min
    rep = analyse(load_run(record.store, "r1"), now=T0 + timedelta(minutes=30))
    rep = with_deadline(rep, RAW, "gcp-us-central1")
    assert rep.deadline is not None and rep.deadline.advice is not None
    assert rep.deadline.advice.action == "switch_to_on_demand"
    text = render(rep)
    assert "Deadline 4 h from the first start (spot policy uniform_progress):" in text
    assert (
        "deadline (uniform_progress): switch to on-demand now (3 h of work left, 3.5 h to the deadline; "
        "no spot capacity now and 3 h > 0.75 x 3.5 h: behind the uniform pace); nothing switches by "
        "itself, run: pulumi config set --stack gcp-us-central1 --path node.market on_demand "
        "&& pulumi up --stack gcp-us-central1"
    ) in text
    doc = report_json(rep)["deadline"]
    assert doc["advice"]["action"] == "switch_to_on_demand" and doc["finished"] is False
    assert doc["command"].startswith("pulumi config set --stack gcp-us-central1")
    shared = report_json(rep, shared=True)["deadline"]
    assert shared["command"] is None and shared["advice"]["work_left_hours"] == 3.0
    assert "gcp-us-central1" not in render(rep, shared=True)


def test_a_serving_node_stays_on_spot(record: Record) -> None:
    record.manifest(["e1", "e2", "e3"])
    record.event(0, "gpu-1", "start", "initial", heartbeat_s=30)
    record.event(29, "gpu-1", "heartbeat")
    rep = with_deadline(analyse(load_run(record.store, "r1"), now=T0 + timedelta(minutes=30)), RAW, None)
    assert rep.deadline is not None and rep.deadline.advice is not None
    assert rep.deadline.advice.action == "stay"
    assert rep.deadline.command is None


def test_a_finished_run_says_whether_it_met_the_deadline(record: Record) -> None:
    record.manifest(["e1", "e2", "e3"])
    record.event(0, "gpu-1", "start", "initial", heartbeat_s=30)
    for i, minutes in enumerate((66, 126, 186)):
        result(record, f"e{i + 1}", minutes)
    record.event(187, "gpu-1", "stop", "done")
    rep = with_deadline(analyse(load_run(record.store, "r1"), now=T0 + timedelta(hours=5)), RAW, None)
    assert rep.deadline is not None and rep.deadline.finished and rep.deadline.met
    assert (
        "Deadline 4 h from the first start (spot policy uniform_progress): met: the last result came 3.1 h"
        in (render(rep))
    )
    late = with_deadline(rep, {**RAW, "deadline_hours": 3}, None)
    assert late.deadline is not None and late.deadline.met is False


def test_the_command_line_gives_the_deadline_only_for_the_users_workload(
    record: Record, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record.manifest(["e1", "e2", "e3"])
    record.taken("gpu-1")
    work = tmp_path / "work.yaml"
    work.write_text(json.dumps(RAW))
    assert (
        report_cli.main(["--store", record.store.url, "--run", "r1", "--workload", str(work), "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["deadline"]["policy"] == "uniform_progress"
    # the built-in example's 24 h deadline is nobody's: no deadline section
    assert report_cli.main(["--store", record.store.url, "--run", "r1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deadline"] is None
