"""`python -m scripts.drill --harness inspect|lm-eval` end to end: the shipped ten-sample task in one
shard on the stand-in server, the node taken in the middle of the shard, the shard finished by the
next node from the samples already in the store.

The server is the stand-in with a gate (`tests/fake_model.py`): in the node's first life it answers
GATE completions and holds the rest, so the shard stops with exactly GATE samples in the store, and
the drill takes the node then (`--preempt-after-samples GATE`: a notice, then the kill). The node's
next life answers everything. One shard of ten samples (`--concurrency 1`) is the smallest run that
has samples before and after the preemption within one shard.
Measured here on 2 cores (2026-12-01; each harness starts twice, once per node life): inspect 60 s
and lm-eval 82 s at a load average of 8-10, 87 s and 106 s at 12-16.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scripts import drill as drill_cli
from spoteval.report import load_run
from spoteval.store import Store
from tests.servers import REPO

# also run beside two busy processes (.ci/loaded-pass); a harness drill loaded takes minutes
pytestmark = [pytest.mark.timing, pytest.mark.timeout(900)]

SHARD = "spoteval_tiny-0001"
#: the stand-in answers rows 0, 1, 3, 5, 6 and 8 of the shipped tasks as their targets say
RIGHT = {0, 1, 3, 5, 6, 8}
INSPECT_IDS = [
    "arith/1",
    "colour 1",
    "geo/1",
    "bio/1",
    "astro/1",
    "phys/1",
    "words/1",
    "colour 2",
    "arith/2",
    "words 2",
]
#: harness: (samples answered before the preemption, metric, sample ids in order, attempts whose
#: harness logs are in the store: inspect's log of the interrupted attempt is uploaded at the
#: notice; lm-eval writes its logs only at the end of a run)
CASES: dict[str, tuple[int, str, list[str] | list[int], int]] = {
    "inspect": (4, "exact", INSPECT_IDS, 2),
    "lm-eval": (3, "exact_match", list(range(10)), 1),
}


def drill(harness: str, gate: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "drill"
    server = (
        f"{sys.executable} -m tests.fake_model --port {{port}} --gate {gate} --once {tmp_path / 'gate-used'}"
    )
    argv = [
        sys.executable, "-m", "scripts.drill", "--harness", harness, "--concurrency", "1",
        "--preempt-after-samples", str(gate), "--server-command", server,
        # no preemption but the one the samples trigger
        "--lifetime-s", "100000", "--notice-s", "1", "--capacity-delay-s", "0.5",
        "--timeout-s", "840", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    return done, out


@pytest.mark.slow
@pytest.mark.parametrize("harness", sorted(CASES))
def test_a_harness_drill_resumes_a_shard_preempted_mid_way(harness: str, tmp_path: Path) -> None:
    gate, metric, ids, logged = CASES[harness]
    done, out = drill(harness, gate, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]

    log: dict[str, Any] = json.loads((out / "drill.json").read_text())
    assert (log["finished"], log["episodes"], log["results"], log["incarnations"]) == (True, 1, 1, 2)
    assert [k["in_flight"] for k in log["kills"]] == [[SHARD]]

    record = load_run(Store(log["store"]), log["run_id"])
    assert [e.id for e in record.manifest or ()] == [SHARD]
    assert Counter(a.outcome for a in record.attempts) == {"interrupted": 1, "completed": 1}
    assert list(record.results) == [SHARD]
    output = record.results[SHARD].output
    assert output is not None
    assert (output["from_store"], output["ran"]) == (gate, 10 - gate)
    scores = {s["id"]: s["scores"][metric] for s in output["samples"]}
    assert scores == {sid: (1.0 if i in RIGHT else 0.0) for i, sid in enumerate(ids)}
    assert len({key.split("/logs/")[1].split("/")[0] for key in output["logs"]}) == logged

    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    [task] = report["scores"]
    assert (task["harness"], task["samples"], task["shards"]) == (harness, 10, 1)
    assert [(m["name"], m["n"], m["mean"]) for m in task["numeric"]] == [(metric, 10, 0.6)]
    assert task["unscored"] == {"harness_error": 0, "model_failure": 0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--preempt-after-samples", "3"],
            "drill: --preempt-after-samples counts harness samples: give --harness",
        ),
        (
            ["--harness", "inspect", "--preempt-after-samples", "0"],
            "drill: --preempt-after-samples must be >= 1, got 0",
        ),
    ],
)
def test_bad_preempt_after_samples_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert drill_cli.main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == message + "\n"
    assert not (tmp_path / "o").exists()
