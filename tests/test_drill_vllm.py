"""The drill with the real model server: vLLM 0.32 on this machine's CPU serving the tiny model.

1. One preemption with episodes in flight, and the node's second start on the same weights disk.
   Asserted: the exact record (one completed result per episode, interrupted attempts exactly for
   the episodes in flight at the notice that did not finish in it, nothing lost, one preemption,
   two starts), every start-up phase in both `ready` events, the second start reusing the first
   one's caches.
2. A user's own inspect task from a folder outside the project, with its requirements, against the
   same server (`--server vllm --task`): both shards complete, every sample asked once, the server
   run through the launcher of the node's unpacked bundle. One start.

After each: no process of the drill's nodes (marked with the drill's folder, or noted as their
descendants while they ran: vLLM's renamed engine and worker), and none of the shared memory they
held, is left (tests/node_guard.py). The guard also ends the nodes when pytest is
interrupted or killed (they run in sessions of their own, as machines of their own).

`make test` builds the vLLM environment (`make vllm`) before pytest runs, so in CI these tests never
skip (with CI set, a missing environment fails them). Marked `vllm`: a loaded pass of the
timing-sensitive tests leaves them out (`-m "not vllm"`). About 7 and 4.5 minutes on 2 shared
cores at load 14-19 (README: Development, for CI's budget).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from spoteval.agent.procgroup import marked
from spoteval.agent.server_phases import PHASE_NAMES
from spoteval.drill import DrillConfig, run_drill
from spoteval.report.load import load_run
from spoteval.store import Store
from spoteval.vllm import VllmMissing, find_env
from spoteval.vllm.facts import CACHE_DIRS
from tests.node_guard import NodeGuard
from tests.own_eval_kit import INSPECT_IDS, WHEEL, build_wheel, user_folder
from tests.servers import REPO

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]

EPISODES = 12
PREEMPT_AFTER = 4


@pytest.fixture(scope="module")
def vllm_ready() -> None:
    try:
        find_env()
    except VllmMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this test: {exc}")
        pytest.skip(str(exc))


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[NodeGuard]:
    """The drill's folder `tmp_path/drill`, guarded: its nodes end with the test, even when pytest
    is interrupted or killed (tests/node_guard.py), and the shared memory they held is noted."""
    with NodeGuard(tmp_path / "drill").active() as g:
        yield g


def _nothing_left(out: Path, guard: NodeGuard) -> None:
    """No process of the drill's nodes, and none of the shared memory they held (whatever its name:
    vLLM's psm_* segments, multiprocessing's semaphores), is left."""
    assert guard.left() == []
    assert marked(str(out)) == []
    assert any("/psm_" in p for p in guard.seen)  # vLLM's own segments were seen while it served
    assert sorted(p for p in guard.seen if os.path.exists(p)) == []


def test_drill_with_real_vllm_records_exactly_and_leaves_nothing(
    vllm_ready: None, guard: NodeGuard, tmp_path: Path
) -> None:
    out = tmp_path / "drill"
    cfg = DrillConfig(
        out=out,
        server="vllm",
        episodes=EPISODES,
        concurrency=4,
        episode_seconds=(2.0, 4.0),
        fail_rate=0.0,
        preempt_after_results=PREEMPT_AFTER,
        lifetime_s=100_000.0,  # after the first preemption, the node lives to the end
        notice_s=3.0,
        capacity_delay_s=1.0,
        timeout_s=1500.0,
        seed=1,
    )
    result = run_drill(cfg)
    assert result.finished, result.notes
    assert (result.results, result.incarnations, len(result.kills)) == (EPISODES, 2, 1)
    [kill] = result.kills
    assert kill.notice_at is not None and kill.in_flight

    record = load_run(Store(result.store_url, result.store_options), result.run_id)
    assert sorted(r.outcome for r in record.results.values()) == ["completed"] * EPISODES
    attempts = list(record.attempts)
    completed = [a for a in attempts if a.outcome == "completed"]
    interrupted = [a for a in attempts if a.outcome == "interrupted"]
    assert sorted(a.episode_id for a in completed) == sorted(record.results)  # one each
    assert len(attempts) == len(completed) + len(interrupted)
    assert not any((a.details or {}).get("lost") for a in interrupted)  # recorded by the agent itself
    # the episodes seen in flight at the notice: each finished within it or was interrupted, once;
    # every interrupted attempt is of the first life (one whose process was just being started
    # when the controller looked is interrupted too, without being seen)
    notice = kill.notice_at
    finished_in_notice = {a.episode_id for a in completed if a.started < notice < a.ended}
    interrupted_ids = {a.episode_id for a in interrupted}
    assert set(kill.in_flight) <= interrupted_ids | finished_in_notice
    assert len(interrupted) == len(interrupted_ids) >= 1
    assert all(a.started < notice < a.ended for a in interrupted)
    assert not interrupted_ids & finished_in_notice
    events = sorted(record.events, key=lambda e: e.time)
    starts = [e for e in events if e.kind == "start" and "incarnation" in e.details]  # the agent's
    readies = [e for e in events if e.kind == "ready"]
    assert [e.reason for e in starts] == ["initial", "restart_after_preemption"]
    operator = [e for e in events if e.kind == "start" and "incarnation" not in e.details]
    assert [e.reason for e in operator] == ["restart_after_preemption"]  # the operator's own record
    assert [e.kind for e in events].count("preempted") == 1
    assert [e.reason for e in events if e.kind == "notice"] == ["sigterm"]
    assert len(readies) == 2
    for ready in readies:
        phases = ready.details["server_phases"]
        assert set(phases) == set(PHASE_NAMES)  # (the record's JSON sorts their keys)
        assert all(isinstance(v, float) and v >= 0 for v in phases.values())
        assert ready.details["server_log"]["reported"]["weights_s"] >= 0

    # the second start found the first one's caches on the node's weights disk, where
    # spoteval/vllm/facts.py says vLLM keeps them under VLLM_CACHE_ROOT
    cache = out / "node" / "cache" / "vllm"
    compiled, inspected = CACHE_DIRS
    [modelinfo] = (cache / inspected).glob("*.json")
    second_start: datetime = starts[1].time
    assert datetime.fromtimestamp(modelinfo.stat().st_mtime, tz=second_start.tzinfo) < second_start
    assert list((cache / compiled).rglob("model"))  # the compiled model, kept
    log = (out / "node" / "work" / result.run_id / "server.log").read_text(errors="replace")
    second = log[log.rindex("Resolved architecture") :]
    assert str(cache / compiled) in second  # looked for it there (vLLM 0.32 on CPU
    # cannot load its own artifact back and compiles again: `server_log.compile_cache`)
    assert readies[1].details["server_log"]["compile_cache"] in ("loaded", "compiled")

    _nothing_left(out, guard)


def test_an_own_task_outside_the_project_runs_against_real_vllm_from_the_bundle(
    vllm_ready: None, guard: NodeGuard, tmp_path: Path
) -> None:
    """`scripts.drill --server vllm --harness inspect --task` with a user's own task (12 samples, in
    a folder outside the project) and its requirements (a wheel built here, installed on the node
    into a venv on its weights disk): both shards complete against the real server, every sample
    asked once and scored, the server started through the launcher of the node's unpacked bundle,
    and nothing left. One start (the preemption path is the test above)."""
    home = user_folder(tmp_path)
    build_wheel(home / "inspect" / "wheels")
    (home / "inspect" / "requirements.txt").write_text(f"./wheels/{WHEEL}\n")
    out = tmp_path / "drill"
    argv = [sys.executable, "-m", "scripts.drill", "--server", "vllm", "--harness", "inspect"]
    argv += ["--task", "inspect/arith12.py@arith12", "--requirements", "inspect/requirements.txt"]
    argv += ["--shard-size", "6", "--concurrency", "2", "--options", '{"max_tokens": 8}']
    argv += ["--lifetime-s", "100000", "--timeout-s", "1500", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIP_NO_INDEX": "1", "ARITH_HELPERS": "1"}
    done = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=1700, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    log = json.loads((out / "drill.json").read_text())
    assert (log["finished"], log["episodes"], log["results"], log["incarnations"], log["kills"]) == (
        True, 2, 2, 1, [],
    )  # fmt: skip
    record = load_run(Store(log["store"]), log["run_id"])
    assert Counter(a.outcome for a in record.attempts) == {"completed": 2}
    outputs = [r.output for r in record.results.values()]
    assert sorted((o["from_store"], o["ran"]) for o in outputs) == [(0, 6), (0, 6)]
    scores = {s["id"]: s["scores"]["includes"] for o in outputs for s in o["samples"]}
    assert sorted(scores) == sorted(INSPECT_IDS) and set(scores.values()) <= {0.0, 1.0}
    [ready] = [e.details for e in record.events if e.kind == "ready"]
    assert set(ready["server_phases"]) == set(PHASE_NAMES)
    assert ready["eval_env"]["reused"] is False

    node = out.resolve() / "node"
    command = json.loads((out / "agent.json").read_text())["server"]["command"]
    assert command[3] == str(home.resolve())  # started in the folder the drill runs in
    assert str(node / "bundle" / "spoteval" / "vllm" / "serve.py") in command
    assert (node / "bundle" / "eval" / "arith12.py").is_file()
    server_log = (node / "work" / log["run_id"] / "server.log").read_text(errors="replace")
    assert server_log.count('"POST /v1/chat/completions HTTP/1.1" 200') == len(INSPECT_IDS)
    _nothing_left(out, guard)
