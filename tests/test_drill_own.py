"""`python -m scripts.drill --task ...` with a user's own eval, from the user's own folder outside the
project (tests/data/own_eval/ copied into a temporary one), against the user's own test model:

- inspect: 12 samples in 2 shards, requirements (a wheel built here) installed on the node into a
  venv kept on the node's cache folder and reused after the preemption, the node taken with 3 (at
  most one more per slot) samples in the store, exact per-sample scores, no finished sample asked
  again;
- lm-eval: 10 documents in 2 shards, stored under their document ids (5-9 in the second), the same;
- a pool of two nodes: the shard cut on one node is finished by the other from the store;
- a failed requirements install: every shard a harness error with pip's message, pip run once per
  node start (no retry storm), the agent's `stop` says so, the drill exits 3 and says why.

Installs never reach an index (`PIP_NO_INDEX=1`): the wheel is local, the missing package fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from spoteval.report import load_run
from spoteval.store import Store
from tests.own_eval_kit import (
    INSPECT_QUESTIONS,
    INSPECT_RIGHT,
    LM_QUESTIONS,
    LM_RIGHT,
    WHEEL,
    asked,
    build_wheel,
    server_pids,
    user_folder,
)
from tests.servers import REPO

MODEL = f"{sys.executable} arith_model.py --port {{port}}"
QUIET = ["--lifetime-s", "100000", "--notice-s", "1", "--capacity-delay-s", "0.5"]


def drill(home: Path, out: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "scripts.drill", "--server-command", MODEL, *options, "--out", str(out)]
    full = {**os.environ, "PYTHONPATH": str(REPO), "PIP_NO_INDEX": "1", **env}
    return subprocess.run(argv, cwd=home, env=full, capture_output=True, text=True, timeout=1100, check=False)


def _record(out: Path) -> tuple[dict[str, Any], Any]:
    log: dict[str, Any] = json.loads((out / "drill.json").read_text())
    return log, load_run(Store(log["store"]), log["run_id"])


def _not_asked_again(home: Path, out: Path, record: Any, questions: dict[Any, str]) -> None:
    """The second server's questions are exactly the samples each shard ran after the preemption."""
    pids = list(dict.fromkeys(pid for pid, _ in asked(home)))
    assert len(pids) == 2 and pids == server_pids(out / "node", record.run_id)  # one server per node life
    later = Counter(q for pid, q in asked(home) if pid == pids[1])
    assert set(later.values()) == {1}  # nothing asked twice by the node that resumed
    for result in record.results.values():
        output = result.output
        shard = {questions[s["id"]] for s in output["samples"]}
        assert len(shard & set(later)) == output["ran"]
        assert output["from_store"] + output["ran"] == len(shard)


def _ready(record: Any) -> list[dict[str, Any]]:
    return [e.details for e in record.events if e.kind == "ready"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_own_inspect_task_with_requirements_resumes_mid_shard(tmp_path: Path) -> None:
    home = user_folder(tmp_path)
    build_wheel(home / "inspect" / "wheels")
    (home / "inspect" / "requirements.txt").write_text(f"./wheels/{WHEEL}\n")
    out = tmp_path / "drill"
    done = drill(
        home, out, "--harness", "inspect", "--task", "inspect/arith12.py@arith12",
        "--requirements", "inspect/requirements.txt", "--concurrency", "2", "--shard-size", "6",
        "--preempt-after-samples", "3", *QUIET, "--timeout-s", "900", ARITH_HELPERS="1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log, record = _record(out)
    assert (log["finished"], log["episodes"], log["results"], log["incarnations"], len(log["kills"])) == (
        True, 2, 2, 2, 1,
    )  # fmt: skip
    assert {r.outcome for r in record.results.values()} == {"completed"}
    scores = {s["id"]: s["scores"]["includes"] for r in record.results.values() for s in r.output["samples"]}
    assert scores == {sid: float(right) for sid, right in INSPECT_RIGHT.items()}
    stored_at_kill = sum(r.output["from_store"] for r in record.results.values())
    assert 3 <= stored_at_kill <= 4  # 3, and at most one more per slot (2 slots)
    assert any(0 < r.output["from_store"] < 6 for r in record.results.values())  # cut inside a shard
    assert Counter(a.outcome for a in record.attempts) == {"interrupted": 2, "completed": 2}
    _not_asked_again(home, out, record, INSPECT_QUESTIONS)
    first, second = (d["eval_env"] for d in _ready(record))
    assert (first["reused"], second["reused"]) == (False, True)
    assert first["requirements"] == second["requirements"]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    [task] = report["scores"]
    assert [(m["name"], m["n"], m["mean"]) for m in task["numeric"]] == [("includes", 12, round(8 / 12, 6))]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_own_lm_eval_folder_stores_document_ids_and_resumes_mid_shard(tmp_path: Path) -> None:
    home = user_folder(tmp_path)
    out = tmp_path / "drill"
    done = drill(
        home, out, "--harness", "lm-eval", "--task", "lm@arith10", "--concurrency", "2",
        "--shard-size", "5", "--preempt-after-samples", "3", *QUIET, "--timeout-s", "1000",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log, record = _record(out)
    assert (log["finished"], log["results"], log["incarnations"]) == (True, 2, 2)
    store = Store(log["store"])
    for episode, docs in (("arith10-0001", range(5)), ("arith10-0002", range(5, 10))):
        prefix = f"runs/{log['run_id']}/harness/{episode}/samples/"
        assert sorted(int(k[len(prefix) :].split("/")[0]) for k in store.list(prefix)) == list(docs)
    scores = {
        s["id"]: s["scores"]["exact_match"] for r in record.results.values() for s in r.output["samples"]
    }
    assert scores == {doc: float(right) for doc, right in LM_RIGHT.items()}
    assert 3 <= sum(r.output["from_store"] for r in record.results.values()) <= 4
    _not_asked_again(home, out, record, LM_QUESTIONS)


POOL_CASES: dict[str, tuple[str, str, str, Mapping[Any, str], Mapping[Any, bool]]] = {
    "inspect": ("inspect/arith12.py@arith12", "12", "includes", INSPECT_QUESTIONS, INSPECT_RIGHT),
    "lm-eval": ("lm@arith10", "10", "exact_match", LM_QUESTIONS, LM_RIGHT),
}


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("harness", sorted(POOL_CASES))
def test_a_shard_cut_on_one_node_resumes_on_another_node_from_the_store(harness: str, tmp_path: Path) -> None:
    task, size, metric, questions, right = POOL_CASES[harness]
    home = user_folder(tmp_path)
    out = tmp_path / "drill"
    done = drill(
        home, out, "--harness", harness, "--task", task, "--nodes", "2", "--concurrency", "1",
        "--shard-size", size, "--preempt-after-samples", "3",
        "--lifetime-s", "100000", "--notice-s", "1", "--capacity-delay-s", "100000", "--timeout-s", "1000",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log, record = _record(out)
    [result] = record.results.values()
    [taken] = [k["node"] for k in log["kills"]]  # the node that ran the shard when 3 were stored
    assert result.node in ("drill-node-1", "drill-node-2") and result.node != taken
    assert (result.output["from_store"], result.output["ran"]) == (3, int(size) - 3)
    scores = {s["id"]: s["scores"][metric] for s in result.output["samples"]}
    assert scores == {sid: float(ok) for sid, ok in right.items()}
    # Whose server asked what, from each node's server log (node 1 is never brought back: one each).
    # The taken node's server asked the 3 it stored and whatever else inspect had in flight when the
    # shard held (it runs samples concurrently): no count of its own says which server resumed.
    run_id = log["run_id"]
    servers = {pid: f"drill-node-{i}" for i in (1, 2) for pid in server_pids(out / f"node-{i}", run_id)}
    assert sorted(servers.values()) == ["drill-node-1", "drill-node-2"]
    by_node: dict[str, Counter[str]] = {}
    for pid, question in asked(home):
        by_node.setdefault(servers[pid], Counter())[question] += 1
    assert set(by_node) == {taken, result.node}
    resumed = by_node[result.node]  # the resuming node's server: the samples that were not in the store
    assert (len(resumed), set(resumed.values())) == (int(size) - 3, {1})  # each asked once
    stored = set(questions.values()) - set(resumed)
    assert len(stored) == 3 and stored <= set(by_node[taken])  # the 3 in the store: the taken node's


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_failed_requirements_install_is_a_harness_error_with_pips_message(tmp_path: Path) -> None:
    home = user_folder(tmp_path)
    out = tmp_path / "drill"
    done = drill(
        home, out, "--harness", "inspect", "--requirement", "spoteval-no-such-package==1.0",
        "--concurrency", "1", "--shard-size", "10", *QUIET, "--timeout-s", "300",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-3000:]
    pip_line = "ERROR: No matching distribution found for spoteval-no-such-package==1.0"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("drill: every episode ended in a harness error (1): requirements install failed (")
    assert last.endswith(pip_line)
    _, record = _record(out)
    assert [a.outcome for a in record.attempts] == ["harness_error", "harness_error"]  # max_attempts 2
    assert all(pip_line in (a.error or "") for a in record.attempts)
    stops = [e.details for e in record.events if e.kind == "stop"]
    assert [d.get("harness_errors") for d in stops] == ["every episode"]  # the agent exits 3, says why
    logs = list((out / "node" / "cache" / "venvs").glob("*.install.log"))
    assert len(logs) == 1 and logs[0].read_text().count(pip_line) == 1  # pip ran once, not per attempt
    text = (out / "report.txt").read_text()
    assert "Harness errors: 1 of 1 episodes failed for reasons that are not the model's" in text
    assert "every episode ended in a harness error" in text and pip_line in text
    assert "Harness errors: 1 of 1 episodes" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_own_episode_command_ships_with_its_workdir_and_starts_there(tmp_path: Path) -> None:
    home = user_folder(tmp_path)
    episodes = home / "episodes"
    episodes.mkdir()
    (episodes / "answers.json").write_text('{"ok": true}')
    (episodes / "run_episode.py").write_text(
        "import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "with open('answers.json') as f:  # relative: the episode starts in its project's folder\n"
        "    data = json.load(f)\n"
        "json.dump({'cwd': os.getcwd(), **data}, open(out, 'w'))\n"
    )
    out = tmp_path / "drill"
    done = drill(
        home, out, "--eval-command", f"{sys.executable} run_episode.py --id {{episode_id}} --out {{output}}",
        "--workdir", "episodes", "--episodes", "3", "--concurrency", "3", *QUIET, "--timeout-s", "300",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    _, record = _record(out)
    assert {r.output["cwd"] for r in record.results.values()} == {str(out / "node" / "bundle" / "eval")}
    assert [r.output["ok"] for r in record.results.values()] == [True, True, True]
