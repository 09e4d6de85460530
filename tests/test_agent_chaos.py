"""Chaos: hundreds of episodes through notices, SIGTERMs, SIGKILLs of the whole node, restarts and a
store outage; afterwards the record must be exact. Plus a short, exact check of lost-attempt recovery."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.__main__ import main
from spoteval.agent.config import STORE_DEFAULTS
from spoteval.sample_episode import will_fail
from spoteval.store import Store
from tests import servers
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    FakeAws,
    Proxy,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    wait_for,
    write_config,
    write_manifest,
)
from tests.faults import attempt_name, traced_attempts

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def _trace(path: Path) -> tuple[Counter[str], Counter[str]]:
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            kind, episode = line.split()[:2]
            (starts if kind == "start" else ends)[episode] += 1
    return starts, ends


def test_a_lost_nodes_in_flight_attempts_are_recorded_interrupted_after_restart(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    trace = tmp_path / "trace.txt"
    ids = [f"e{i}" for i in range(8)]
    config = agent_config(
        file_target.url,
        {},
        "r1",
        tmp_path,
        concurrency=4,
        command=episode_command(seconds=30, trace=str(trace)),
    )
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: sum(_trace(trace)[0].values()) == 4, 30)
    assert agent.signal_all(signal.SIGKILL) == 6  # agent, model server, four episodes
    agent.wait(10)
    config["episodes"]["command"] = episode_command(seconds=0.05, trace=str(trace))
    write_config(Path(path), config)
    again = start_agent(path, tmp_path)
    agents.append(again)
    assert again.wait(60) == 0, again.stderr()
    record = read_record(Store(file_target.url, {}), "r1")
    killed = {e for e, n in _trace(trace)[0].items() if n > _trace(trace)[1][e]}
    assert len(killed) == 4
    for e in ids:
        expected = ["interrupted", "completed"] if e in killed else ["completed"]
        assert record.outcomes(e) == expected
    lost = [a for e in killed for a in record.attempts[e] if a.outcome == "interrupted"]
    assert all(a.details["lost"] is True and "node lost" in (a.error or "") for a in lost)
    start = [e for e in record.events if e.kind == "start"][1]
    assert start.reason == "restart_after_preemption"
    assert start.details["previous"]["evidence"] == "lost"
    assert start.details["recovered"]["lost_attempts"] == 4
    assert start.details["resolved"] == [lost[0].details["incarnation"]]


# --- the long one --------------------------------------------------------------------------------

ACTIONS = (
    "sigterm_agent",
    "sigkill_node",
    "aws_notice",
    "outage_then_continue",
    "sigterm_node",
    "outage_then_sigkill",
    "rebalance_then_sigkill",
    "sigkill_node",
)
EVIDENCE = {
    "sigterm_agent": "notice:sigterm",
    "sigterm_node": "notice:sigterm",
    "outage_then_continue": "notice:sigterm",
    "aws_notice": "notice:spot_interruption",
    "sigkill_node": "lost",
    "outage_then_sigkill": "lost",
    "rebalance_then_sigkill": "lost",
}


@pytest.mark.slow
def test_chaos_every_episode_one_result_and_every_killed_attempt_interrupted(
    moto_server: servers.Server, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    bucket = f"t{os.urandom(6).hex()}"
    servers.create_s3_bucket(moto_server, bucket)
    proxy = Proxy(moto_server.port)
    aws = FakeAws()
    try:
        _chaos(moto_server, bucket, proxy, aws, tmp_path, agents)
    finally:
        proxy.close()
        aws.close()


def _chaos(
    moto: servers.Server, bucket: str, proxy: Proxy, aws: FakeAws, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    url = f"s3://{bucket}/evals"
    direct = Store(url, servers.s3_store_options(moto))
    trace = tmp_path / "trace.txt"
    ids = [f"ep{i:03d}" for i in range(400)]
    failing = {e for e in ids if will_fail(e, 0.03, seed=11)}
    options: dict[str, Any] = {**STORE_DEFAULTS, **servers.s3_store_options(moto), "endpoint": proxy.url}
    config = agent_config(
        url,
        options,
        "chaos",
        tmp_path,
        provider="aws",
        metadata_url=aws.url,
        metadata_poll_s=0.1,
        concurrency=16,
        max_attempts=2,
        heartbeat_s=0.5,
        sigterm_grace_s=3,
        price={"per_hour": 2.0},
        command=episode_command(seconds=0.05, max_seconds=0.3, fail_rate=0.03, seed=11, trace=str(trace)),
    )
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0

    def results() -> int:
        return len(direct.list("runs/chaos/results/"))

    def progress(agent: AgentProcess, more: int) -> bool:
        goal = results() + more
        return wait_for(lambda: results() >= goal or agent.proc.poll() is not None, 60, interval=0.1)

    expected_evidence: list[str] = []
    expected_notices: list[str] = []
    for action in ACTIONS:
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert progress(agent, 20), agent.stderr()
        assert agent.proc.poll() is None, f"the run ended before {action}: {agent.stderr()}"
        if action == "sigterm_agent":
            agent.signal_group(signal.SIGTERM)
            expected_notices.append("sigterm")
        elif action == "sigterm_node":  # the OS shutting down: every process gets SIGTERM at once
            agent.signal_all(signal.SIGTERM)
            expected_notices.append("sigterm")
        elif action == "aws_notice":
            aws.interrupt("stop", seconds=1)  # too soon for anything to finish: killed, interrupted
            expected_notices.append("spot_interruption")
        elif action == "outage_then_continue":
            proxy.cut()
            time.sleep(1.5)
            proxy.restore()
            assert progress(agent, 20)
            agent.signal_group(signal.SIGTERM)
            expected_notices.append("sigterm")
        elif action == "outage_then_sigkill":
            proxy.cut()
            time.sleep(1.5)
            assert os.listdir(tmp_path / "spool" / "chaos")  # work finished meanwhile waits on local disk
            agent.signal_all(signal.SIGKILL)
            proxy.restore()
        elif action == "rebalance_then_sigkill":
            aws.recommend_rebalance()
            expected_notices.append("rebalance_recommendation")
            assert progress(agent, 20)
            agent.signal_all(signal.SIGKILL)
        else:
            agent.signal_all(signal.SIGKILL)
        code = agent.wait(30)
        # after a notice: 0 once everything is in the store, 1 if the notice ended with objects spooled
        spooled = "still spooled" in agent.stderr().rsplit("notice handled", 1)[-1]
        expected = -signal.SIGKILL if "sigkill" in action else 1 if spooled else 0
        assert code == expected, (action, agent.stderr())
        aws.instance_action = aws.rebalance = None
        expected_evidence.append(EVIDENCE[action])
        agent.signal_all(signal.SIGKILL)  # nothing of this node outlives it (model server, episodes)

    final = start_agent(path, tmp_path)
    agents.append(final)
    assert final.wait(180) == 0, final.stderr()

    record = read_record(direct, "chaos")
    traced = traced_attempts(trace)
    # every episode exactly one result, with the outcome its behaviour decides
    assert set(record.results) == set(ids)
    recorded: dict[str, Any] = {}
    for e in ids:
        attempts = record.attempts[e]
        outcomes = [a.outcome for a in attempts]
        assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1)), e  # numbers never collide
        for a in attempts:
            name = attempt_name(a)
            assert name not in recorded, name  # no attempt recorded twice
            recorded[name] = a
        result = record.results[e]
        if e in failing:
            assert outcomes.count("model_failure") == 2 and "completed" not in outcomes, (e, outcomes)
            assert result.outcome == "model_failure"
        else:
            assert "model_failure" not in outcomes, (e, outcomes)  # killed work is never a failure
            assert outcomes.count("completed") == 1, (e, outcomes)  # no completed work lost and re-run
            completed = next(a for a in attempts if a.outcome == "completed")
            assert result.outcome == "completed" and result.output == completed.output
            assert result.attempt == completed.attempt
    # every attempt that ran is recorded once, with the outcome its end decides
    assert set(traced) <= set(recorded), sorted(set(traced) - set(recorded))
    by_cause: Counter[str] = Counter()
    for name, a in recorded.items():
        exit_code = traced[name][1] if name in traced else None
        if name not in traced:  # killed before its process wrote its first line
            cause = "killed before start"
        elif exit_code is None:  # killed while it ran
            cause = "killed"
        elif exit_code == 0:
            cause = "completed"
        else:
            cause = "failed"
        by_cause[cause] += 1
        if cause.startswith("killed"):
            assert a.outcome == "interrupted", (name, a.outcome, a.error)
        elif cause == "completed":
            # exited 0: completed, unless killed in the instant between its last line and its exit
            cut_short = a.details.get("lost") is True or (a.error or "").startswith(
                ("ended during shutdown", "killed by the agent")
            )
            assert a.outcome == "completed" or (a.outcome == "interrupted" and cut_short), (name, a.error)
        else:  # failed by itself: a model failure, unless the node went before the failure was final
            cut_short = a.details.get("lost") is True or (a.error or "").startswith(
                ("ended during shutdown", "killed by the agent")  # (in the instant after its last line)
            )
            assert a.outcome == "model_failure" or (a.outcome == "interrupted" and cut_short), (name, a.error)
    assert by_cause["killed"] > 0
    errors = [
        a.error or "" for items in record.attempts.values() for a in items if a.outcome == "interrupted"
    ]
    # the OS's SIGTERM to every process (sigterm_node): what that life had in flight is interrupted,
    # never a failure (asserted above for every killed process); each ended either by the SIGTERM
    # itself or by the agent first (the model server went with the shutdown, so the agent ends what
    # is left at once): which comes first is the machine's scheduling
    lives = [e.details["incarnation"] for e in record.events if e.kind == "start"]
    shutdown_life = lives[ACTIONS.index("sigterm_node")]
    cut = [a for a in recorded.values() if a.details.get("incarnation") == shutdown_life]
    cut = [a for a in cut if a.outcome == "interrupted"]  # (its processes killed: interrupted, above)
    shutdown_forms = ("ended during shutdown", "killed by the agent")
    assert cut and all((a.error or "").startswith(shutdown_forms) for a in cut), [a.error for a in cut]
    assert any(x.startswith("node lost") for x in errors)  # recorded by the next incarnation
    assert any(x.startswith("killed by the agent") for x in errors)  # the notice deadline came first

    # every start, notice and stop, with reasons and prices
    start_events = [e for e in record.events if e.kind == "start"]
    assert len(start_events) == len(ACTIONS) + 1
    assert start_events[0].reason == "initial"
    assert [s.reason for s in start_events[1:]] == ["restart_after_preemption"] * len(ACTIONS)
    assert [s.details["previous"]["evidence"] for s in start_events[1:]] == expected_evidence
    for event in record.events:
        assert (event.price_per_hour, event.currency, event.price_source) == (2.0, "USD", "configured")
    notices = [e.reason for e in record.events if e.kind == "notice" and not e.details.get("while_stopping")]
    assert notices == expected_notices
    stops = [e for e in record.events if e.kind == "stop"]
    assert [s.reason for s in stops] == ["done"] and record.events[-1] is stops[0]
    lost_total = sum(s.details["recovered"]["lost_attempts"] for s in start_events)
    assert lost_total == sum(1 for a in recorded.values() if a.details.get("lost") is True) > 0
    summary = json.loads(json.dumps(stops[0].details))
    assert summary["counts"]["final"] == len(ids)
