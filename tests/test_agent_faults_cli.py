"""`python -m spoteval.agent` run as a process with bad input: one line naming the problem, exit 2,
nothing started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_metadata import agent_config, write_config
from tests.servers import REPO

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spoteval.agent", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("spot-eval-agent: ")
    return lines[0]


def test_a_missing_config_file_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_agent("--config", str(tmp_path / "nope.json")))
    assert line == f"spot-eval-agent: config {tmp_path / 'nope.json'}: cannot read: No such file or directory"


def test_a_missing_manifest_file_is_one_line(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "agent.json", agent_config(f"file://{tmp_path}/store", {}, "r1", tmp_path)
    )
    line = _one_line(_agent("manifest", "--config", config, str(tmp_path / "m.jsonl")))
    assert line == f"spot-eval-agent: manifest {tmp_path / 'm.jsonl'}: cannot read: No such file or directory"
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.jsonl"))


def test_an_unknown_option_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_agent("--config", str(tmp_path / "agent.json"), "--bogus"))
    assert line == "spot-eval-agent: unrecognized arguments: --bogus"


def test_no_config_option_is_one_line() -> None:
    line = _one_line(_agent("run"))
    assert line == "spot-eval-agent: the following arguments are required: --config"


def test_an_unknown_command_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_agent("runn", "--config", str(tmp_path / "agent.json")))
    assert line.startswith("spot-eval-agent: argument command: invalid choice: 'runn'")


def test_the_agent_benchmark_fails_on_every_missed_or_unmeasured_target() -> None:
    from benchmarks.agent_bench import missed_targets

    met = {"durable_p99_s": 0.5, "peak_rss_mb": 60.0}
    assert missed_targets([met, {"notice_event_durable_s": 0.2, "all_in_flight_recorded_s": 2.0}]) == []
    missed = missed_targets([{**met, "durable_p99_s": 1.2}, {"notice_event_durable_s": None}])
    assert missed == [
        "target missed: durable_p99_s = 1.200 > 1",
        "target missed: notice_event_durable_s was not measured (target <= 1)",
    ]
