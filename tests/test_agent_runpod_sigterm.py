"""Runpod's 5 s notice: SIGTERM, then SIGKILL of everything 5 s later, with episodes in flight.

The real agent (`python -m spoteval.agent`, provider runpod, so the 5 s SIGTERM grace is the
provider's default) runs on a moto S3 store. While some episodes have completed and others are in
flight, the pod is told to go (SIGTERM to the agent) and every process the agent started is
SIGKILLed 5 s later, as Runpod does. Straight after the kill, before anything restarts:

- every episode that completed is already durable in the store (its result and its attempt);
- every attempt the notice cut short is recorded `interrupted`, never `model_failure`;
- the `sigterm` notice event is durable with Runpod's 5 s deadline;
- the pod did not call the `stop` action (the provider is taking it anyway; `on_done: api_stop` is only
  for stop rules).

Then the agent restarts on the same store: any killed attempt whose record could not be written
before the SIGKILL is recovered as `interrupted`, and every episode ends with exactly one result.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.__main__ import main
from spoteval.record import RunLayout, parse_time
from spoteval.store import Store
from tests import servers
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    Proxy,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    wait_for,
    write_config,
    write_manifest,
)
from tests.fake_runpod import FakeRunpod
from tests.faults import attempt_name, traced_attempts

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

RUNPOD_NOTICE_S = 5.0


def _stopped_by_agent(attempt: Any) -> bool:
    return (attempt.error or "").startswith("killed by the agent")


@pytest.fixture
def runpod_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunpod]:
    fake = FakeRunpod()
    fake.add_pod("pod-sigterm")
    for key, value in {**fake.env, "RUNPOD_POD_ID": "pod-sigterm"}.items():
        monkeypatch.setenv(key, value)  # the agent process inherits them, as inside a pod
    try:
        yield fake
    finally:
        fake.close()


def _trace(path: Path) -> tuple[Counter[str], dict[str, list[int]]]:
    """Starts per episode, and the exit codes of the attempts that ended by themselves."""
    starts: Counter[str] = Counter()
    ends: dict[str, list[int]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[0] == "start":
                starts[parts[1]] += 1
            elif parts[0] == "end" and len(parts) >= 4:
                ends.setdefault(parts[1], []).append(int(parts[3]))
    return starts, ends


def test_runpod_sigterm_then_sigkill_five_seconds_later_loses_no_completed_result(
    s3_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess], runpod_api: FakeRunpod
) -> None:
    trace = tmp_path / "trace.txt"
    ids = [f"ep{i:03d}" for i in range(48)]
    config = agent_config(
        s3_target.url,
        s3_target.options,
        "rp-notice",
        tmp_path,
        node="pod-sigterm",
        provider="runpod",
        concurrency=8,
        heartbeat_s=1.0,
        # each episode takes between 0.2 and 12 s (fixed per id): some finish, some are in flight
        command=episode_command(seconds=0.2, max_seconds=12.0, seed=3, trace=str(trace)),
        stop_rules={"on_done": "api_stop"},
    )
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    agent = start_agent(path, tmp_path)
    agents.append(agent)

    def busy() -> bool:
        starts, ends = _trace(trace)
        return (
            sum(len(v) for v in ends.values()) >= 6
            and sum(starts.values()) - sum(map(len, ends.values())) >= 5
        )

    assert wait_for(busy, 90, interval=0.05), agent.stderr()
    in_flight_at_sigterm = sum(1 for _, code in traced_attempts(trace).values() if code is None)
    sigterm_at = time.monotonic()
    os.kill(agent.proc.pid, signal.SIGTERM)  # the container's main process: the agent
    exited_by_itself = wait_for(lambda: agent.proc.poll() is not None, RUNPOD_NOTICE_S, interval=0.02)
    time.sleep(max(0.0, sigterm_at + RUNPOD_NOTICE_S - time.monotonic()))
    agent.signal_all(signal.SIGKILL)  # Runpod's SIGKILL: nothing of the pod outlives it
    agent.wait(10)
    took = time.monotonic() - sigterm_at

    # --- straight after the kill, before any restart ------------------------------------------
    assert exited_by_itself, (
        f"still running at Runpod's SIGKILL, {took:.2f} s after SIGTERM: {agent.stderr()}"
    )
    assert agent.proc.returncode == 0
    store = Store(s3_target.url, s3_target.options)
    record = read_record(store, "rp-notice")
    traced = traced_attempts(trace)
    recorded = {attempt_name(a): a for attempts in record.attempts.values() for a in attempts}
    assert len(recorded) == sum(len(v) for v in record.attempts.values())  # none recorded twice
    # the agent exited inside the notice having recorded every attempt it started, each by how it ended
    assert set(traced) <= set(recorded), sorted(set(traced) - set(recorded))
    completed = {e for e, code in traced.values() if code == 0}
    killed = {name for name, (_, code) in traced.items() if code is None}
    assert in_flight_at_sigterm >= 5 and killed  # the notice cut work short (the set-up, not a result)
    for name, a in recorded.items():
        if name not in traced or traced[name][1] is None:  # killed (before or after its first line)
            assert a.outcome == "interrupted", (name, a.outcome, a.error)
        else:
            assert traced[name][1] == 0 and a.outcome == "completed", (name, traced[name], a.outcome)
            assert record.results[a.episode_id].outcome == "completed"
    assert sorted(record.results) == sorted(completed)  # every completed episode is durable
    notices = [e for e in record.events if e.kind == "notice"]
    assert [(n.reason, n.provider) for n in notices] == [("sigterm", "runpod")]
    deadline_s = (parse_time(notices[0].details["deadline"]) - notices[0].time).total_seconds()
    assert deadline_s == pytest.approx(RUNPOD_NOTICE_S, abs=0.5)
    assert runpod_api.operations() == []  # a notice is the provider's stop: no stop from the pod
    killed_by_episode = Counter(traced[name][0] for name in killed) + Counter(
        a.episode_id for name, a in recorded.items() if name not in traced
    )
    print(
        f"SIGTERM -> agent exited by itself after {took:.2f} s; "
        f"{len(completed)} completed, {len(killed)} killed, {len(recorded)} attempts recorded"
    )

    # --- the pod comes back: the record is completed, nothing is lost or doubled ------------------
    config["episodes"]["command"] = episode_command(seconds=0.05, trace=str(trace))
    write_config(Path(path), config)
    again = start_agent(path, tmp_path)
    agents.append(again)
    assert again.wait(120) == 0, again.stderr()
    final = read_record(store, "rp-notice")
    assert sorted(final.results) == ids
    assert all(final.results[e].outcome == "completed" for e in ids)
    for episode in ids:
        interrupted = [a for a in final.attempts[episode] if a.outcome == "interrupted"]
        assert len(interrupted) == killed_by_episode[episode], (episode, final.outcomes(episode))
    assert "model_failure" not in [a.outcome for attempts in final.attempts.values() for a in attempts]
    for episode in completed:  # the result written before the kill is the one that stands
        assert final.results[episode] == record.results[episode]
    stop = [e for e in final.events if e.kind == "stop"]
    assert [s.reason for s in stop] == ["done"]
    # the run is done: the pod stops itself through Runpod's API (on_done: api_stop)
    assert runpod_api.variables("podAction") == [{"id": "pod-sigterm", "action": "stop"}]


@pytest.mark.parametrize("container_disk", ["kept", "erased"])
def test_killed_attempts_the_pod_could_not_record_are_recovered_interrupted_on_the_next_start(
    moto_server: servers.Server, tmp_path: Path, agents: list[AgentProcess], container_disk: str
) -> None:
    """The store is unreachable from the SIGTERM on, so nothing of the notice reaches it before the
    SIGKILL. Runpod keeps the container disk across a stop only sometimes (a resume may land on a
    fresh one): with the spool kept, the next start uploads what it holds; with it erased, the next
    start finds the attempts the record shows in flight and records them `interrupted` (lost)."""
    bucket = f"rp{uuid.uuid4().hex[:10]}"
    servers.create_s3_bucket(moto_server, bucket)
    url = f"s3://{bucket}/evals"
    direct = Store(url, servers.s3_store_options(moto_server))
    proxy = Proxy(moto_server.port)
    try:
        trace = tmp_path / "trace.txt"
        ids = [f"ep{i:03d}" for i in range(24)]
        options = {**servers.s3_store_options(moto_server), "endpoint": proxy.url}
        config = agent_config(
            url,
            options,
            "rp-lost",
            tmp_path,
            node="pod-lost",
            provider="runpod",
            concurrency=6,
            heartbeat_s=0.5,
            command=episode_command(seconds=0.2, max_seconds=15.0, seed=5, trace=str(trace)),
        )
        path = write_config(tmp_path / "agent.json", config)
        assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
        agent = start_agent(path, tmp_path)
        agents.append(agent)

        def settled() -> bool:  # some completed and durable, several in flight, the in-flight list durable
            starts, ends = _trace(trace)
            done = {e for e, codes in ends.items() if 0 in codes}
            flying = sum(starts.values()) - sum(map(len, ends.values()))
            durable = {k.rsplit("/", 1)[-1][:-5] for k in direct.list(RunLayout("rp-lost").results_prefix)}
            return len(done) >= 3 and flying >= 4 and done <= durable

        assert wait_for(settled, 90, interval=0.1), agent.stderr()
        time.sleep(1.2)  # a heartbeat listing what is in flight reaches the store
        proxy.cut()
        time.sleep(0.5)  # a write the store was already taking at the cut lands
        before = read_record(direct, "rp-lost")
        sigterm_at = time.monotonic()
        os.kill(agent.proc.pid, signal.SIGTERM)
        time.sleep(max(0.0, sigterm_at + RUNPOD_NOTICE_S - time.monotonic()))
        agent.signal_all(signal.SIGKILL)
        agent.wait(10)
        killed = {name for name, (_, code) in traced_attempts(trace).items() if code is None}
        assert killed
        [before_incarnation] = {e.details["incarnation"] for e in before.events}
        after_kill = read_record(direct, "rp-lost")
        assert after_kill.results == before.results  # nothing reached the store after the cut
        assert "interrupted" not in [a.outcome for v in after_kill.attempts.values() for a in v]
        if container_disk == "erased":
            shutil.rmtree(tmp_path / "spool")
            shutil.rmtree(tmp_path / "work", ignore_errors=True)
        proxy.restore()

        config["episodes"]["command"] = episode_command(seconds=0.05, trace=str(trace))
        write_config(Path(path), config)
        again = start_agent(path, tmp_path)
        agents.append(again)
        assert again.wait(120) == 0, again.stderr()
    finally:
        proxy.close()
    final = read_record(direct, "rp-lost")
    assert sorted(final.results) == ids
    assert all(final.results[e].outcome == "completed" for e in ids)
    assert "model_failure" not in [a.outcome for v in final.attempts.values() for a in v]
    traced = traced_attempts(trace)
    recorded = {attempt_name(a): a for v in final.attempts.values() for a in v}
    assert len(recorded) == sum(len(v) for v in final.attempts.values())  # none recorded twice
    interrupted = {name for name, a in recorded.items() if a.outcome == "interrupted"}
    untraced = set(recorded) - set(traced)  # killed before the process wrote its first line
    if container_disk == "kept":  # written by the notice handling, spooled, uploaded by the next start
        # (also one the agent stopped in the instant between its last line and its exit)
        assert set(traced) <= set(recorded)
        cut_short = {n for n in interrupted - killed - untraced if _stopped_by_agent(recorded[n])}
        assert interrupted == killed | untraced | cut_short
        assert not any(recorded[name].details.get("lost") for name in interrupted)
    else:  # recovered from the record by the next start: every attempt of the lost node not yet durable
        durable = {attempt_name(a) for v in before.attempts.values() for a in v}
        # what the first incarnation's journal in the store shows in flight (an attempt dispatched
        # after the cut, when the store did not answer, is journaled in the erased spool only)
        journaled = {
            f"{episode}.{before_incarnation}.{dispatch}"
            for event in after_kill.events
            if event.details.get("incarnation") == before_incarnation
            for episode, dispatch, _ in event.details.get("in_flight", [])
        }
        assert set(traced) & (journaled | durable) <= set(recorded)
        first = {name for name, a in recorded.items() if a.details["incarnation"] == before_incarnation}
        assert interrupted == first - durable
        assert killed & journaled and killed & journaled <= interrupted
        assert all(recorded[name].details.get("lost") is True for name in interrupted)
    for episode, result in before.results.items():
        assert final.results[episode] == result
    start = [e for e in final.events if e.kind == "start"][-1]
    assert start.reason == "restart_after_preemption"
