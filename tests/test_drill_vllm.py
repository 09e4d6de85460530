"""The drill with the real model server: vLLM 0.32 on this machine's CPU serving the tiny model, one
preemption with episodes in flight, and the node's second start on the same weights disk.

Asserted: the exact record (one completed result per episode, interrupted attempts exactly for the
episodes in flight at the notice that did not finish in it, nothing lost, one preemption, two
starts), every start-up phase in both `ready` events, the second start reusing the first one's
caches, and no process or shared memory of the node left once the drill ends.

`make test` builds the vLLM environment (`make vllm`) before pytest runs, so in CI this test never
skips (with CI set, a missing environment fails it). Marked `vllm`: a loaded pass of the
timing-sensitive tests leaves it out (`-m "not vllm"`). About 4-8 minutes on 2 shared cores.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from spoteval.agent.procgroup import marked, orphaned_shm, shm_now
from spoteval.agent.server_phases import PHASE_NAMES
from spoteval.drill import DrillConfig, run_drill
from spoteval.report.load import load_run
from spoteval.store import Store
from spoteval.vllm import VllmMissing, find_env

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


def test_drill_with_real_vllm_records_exactly_and_leaves_nothing(vllm_ready: None, tmp_path: Path) -> None:
    shm_before = shm_now()
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

    # the second start found the first one's caches on the node's weights disk
    cache = out / "node" / "cache" / "vllm"
    [modelinfo] = (cache / "modelinfos").glob("*.json")
    second_start: datetime = starts[1].time
    assert datetime.fromtimestamp(modelinfo.stat().st_mtime, tz=second_start.tzinfo) < second_start
    assert list((cache / "torch_compile_cache").rglob("model"))  # the compiled model, kept
    log = (out / "node" / "work" / result.run_id / "server.log").read_text(errors="replace")
    second = log[log.rindex("Resolved architecture") :]
    assert str(cache / "torch_compile_cache") in second  # looked for it there (vLLM 0.32 on CPU
    # cannot load its own artifact back and compiles again: `server_log.compile_cache`)
    assert readies[1].details["server_log"]["compile_cache"] in ("loaded", "compiled")

    assert marked(str(out)) == []
    # vLLM's shared memory (psm_*, hundreds of MB) is gone; 32-byte sem.mp-* semaphores are left
    # out: any Python multiprocessing program on the machine makes them, so one cannot be told apart
    assert {k: v for k, v in orphaned_shm(shm_before).items() if "/psm_" in k} == {}
