"""Every command line of the project, run as a process with a bad option: one line naming the
problem, exit 2, nothing on stdout (argparse's multi-line usage is not the project's error format)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.servers import REPO

CASES = [
    (
        ("scripts.measure_restart", "--outputs", "x.json", "--cycles", "0"),
        "python -m scripts.measure_restart: argument --cycles: '0' must be a whole number >= 1",
    ),
    (
        ("scripts.measure_restart", "--outputs", "x.json", "--cycles", "two"),
        "python -m scripts.measure_restart: argument --cycles: 'two' must be a whole number >= 1",
    ),
    (
        ("scripts.measure_restart",),
        "python -m scripts.measure_restart: one of the arguments --stack --outputs is required",
    ),
    (
        ("scripts.operate", "status"),
        "python -m scripts.operate: one of the arguments --stack --outputs is required",
    ),
    (
        ("scripts.operate", "--stack", "a", "--interval", "0"),
        "python -m scripts.operate: argument --interval: '0' must be > 0",
    ),
    (
        ("scripts.operate", "--stack", "a", "--backoff", "-1"),
        "python -m scripts.operate: argument --backoff: '-1' must be > 0",
    ),
    (("scripts.plan",), "python -m scripts.plan: the following arguments are required: --stack"),
    (
        ("spoteval.standin", "--port", "eighty"),
        "python -m spoteval.standin: argument --port: invalid int value: 'eighty'",
    ),
    (
        ("spoteval.sample_episode", "--episode-id", "e1"),
        "python -m spoteval.sample_episode: the following arguments are required: --model-url, --output",
    ),
    (
        ("spoteval.drill", "node", "--config", "a.json"),
        "python -m spoteval.drill node: the following arguments are required: --boot-file",
    ),
    (
        ("spoteval.drill", "--bogus"),
        "python -m spoteval.drill: the commands are `node --config agent.json --boot-file FILE` "
        "and `operator DIR [--once]`",
    ),
    (
        ("spoteval.drill", "operator"),
        "python -m spoteval.drill operator: the following arguments are required: folder",
    ),
    (
        ("scripts.operate", "--stack", "a", "--lease-ttl", "1"),
        "python -m scripts.operate: argument --lease-ttl: '1' must be at least 2",
    ),
    (("spoteval.agent", "--bogus", "--config", "a.json"), "spot-eval-agent: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("argv", "line"), CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_a_bad_option_is_one_line_and_exit_2(argv: tuple[str, ...], line: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines == [line]
