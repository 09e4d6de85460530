"""Notices under faults, with the agent as a process: a metadata service that first answers broken
replies, a notice while the agent is still booting, the GCP long poll without ETags, a model server
whose health endpoint answers garbage, the SIGTERM grace per provider, and SIGTERM to episodes."""

from __future__ import annotations

import re
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent import notices
from spoteval.agent.__main__ import main
from spoteval.record import parse_time
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    FakeAws,
    FakeAzure,
    FakeServer,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    wait_for,
    write_config,
    write_manifest,
)
from tests.faults import FakeGcpMaintenance, FaultyFront, GatedPrices
from tests.servers import free_port

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

FAULTS = ("truncated", "garbage", "500", "bad_utf8", "hangup")
TRIVIAL = ["sh", "-c", "echo '{\"ok\": true}' > {output}"]


def _starts(trace: Path) -> int:
    if not trace.exists():
        return 0
    return sum(1 for line in trace.read_text().splitlines() if line.startswith("start"))


def _setup(target: StoreTarget, tmp_path: Path, ids: list[str], **kw: Any) -> tuple[str, dict[str, Any]]:
    config = agent_config(target.url, target.options, "r1", tmp_path, **kw)
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    return path, config


# (provider, how the notice is given, the notice reason the record must show)
CASES = [
    ("aws", "spot", "spot_interruption"),
    ("gcp", "preempt", "preempted"),
    ("gcp", "maintenance", "scheduled_event"),
    ("azure", "Preempt", "scheduled_event"),
    ("azure", "Terminate", "scheduled_event"),
    ("azure", "Reboot", "scheduled_event"),
    ("azure", "Redeploy", "scheduled_event"),
]


@pytest.mark.parametrize(("provider", "how", "reason"), CASES, ids=[f"{p}-{h}" for p, h, _ in CASES])
def test_a_notice_after_broken_metadata_replies_is_acted_on(
    provider: str,
    how: str,
    reason: str,
    file_target: StoreTarget,
    tmp_path: Path,
    agents: list[AgentProcess],
) -> None:
    fake: FakeServer = (
        FakeAws() if provider == "aws" else FakeGcpMaintenance() if provider == "gcp" else FakeAzure()
    )
    front = FaultyFront(fake.url)
    front.inject(*FAULTS)  # served to the watcher's first requests, whatever they are
    try:
        trace = tmp_path / "trace.txt"
        path, _ = _setup(
            file_target,
            tmp_path,
            [f"e{i}" for i in range(4)],
            provider=provider,
            concurrency=2,
            metadata_url=front.url,
            metadata_poll_s=0.1 if provider != "gcp" else 1.0,
            price={"per_hour": 1.0},
            command=episode_command(seconds=30, trace=str(trace)),
        )
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert wait_for(lambda: front.left() == 0 and _starts(trace) == 2, 30), agent.stderr()
        if isinstance(fake, FakeAws):
            fake.interrupt("stop", seconds=60)
        elif isinstance(fake, FakeGcpMaintenance):
            fake.preempt() if how == "preempt" else fake.schedule_maintenance()
        else:
            assert isinstance(fake, FakeAzure)
            fake.schedule(how, seconds=60)
        store = Store(file_target.url, {})
        noticed = wait_for(lambda: any(e.kind == "notice" for e in read_record(store, "r1").events), 15)
        assert noticed, f"no notice recorded after {[f for f, _ in front.served]}: {agent.stderr()}"
        assert agent.wait(30) == 0, agent.stderr()
        record = read_record(store, "r1")
        assert [k for k in record.kinds() if k[0] != "ready"] == [("start", "initial"), ("notice", reason)]
        outcomes = sorted(o for e in record.attempts for o in record.outcomes(e))
        assert outcomes == ["interrupted", "interrupted"]
        assert record.results == {}
        assert [f for f, _ in front.served] == list(FAULTS)
        failures = re.findall(r"notice watcher \S+ failed", agent.stderr())
        assert len(failures) == (2 if provider == "gcp" else 1), agent.stderr()  # logged, throttled
        if isinstance(fake, FakeAzure):
            assert len(fake.acks) == 1
    finally:
        front.close()
        fake.close()


def test_the_provider_watcher_runs_while_the_agent_still_reads_its_price(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    azure = FakeAzure()
    prices = GatedPrices()
    prices.gate.clear()  # the price lookup hangs until the test opens the gate
    try:
        path, _ = _setup(
            file_target,
            tmp_path,
            ["a", "b"],
            provider="azure",
            metadata_url=azure.url,
            metadata_poll_s=0.1,
            price_api_url=prices.url + "/api/retail/prices",
            command=episode_command(seconds=30),
        )
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert prices.asked.wait(30), agent.stderr()

        def polls() -> int:
            return sum(1 for r in list(azure.requests) if r.path == "/metadata/scheduledevents")

        azure.schedule("Preempt", seconds=60)
        scheduled_at = polls()
        # the watcher polls in sequence and delivers a poll's notices before its next poll: a second
        # poll after the schedule means the first one's notice is with the agent, price still unread
        polled = wait_for(lambda: polls() >= scheduled_at + 2, 30)
        prices.gate.set()
        assert polled, agent.stderr()
        assert agent.wait(30) == 0, agent.stderr()
        record = read_record(Store(file_target.url, {}), "r1")
        assert record.kinds() == [("start", "initial"), ("notice", "scheduled_event")]
        assert record.attempts == {} and record.results == {}
        assert len(azure.acks) == 1
    finally:
        prices.gate.set()
        prices.close()
        azure.close()


class _NoEtagGcp(FakeGcpMaintenance):
    def __init__(self) -> None:
        super().__init__(etags=False)


def test_gcp_without_etags_polls_at_its_interval_instead_of_spinning() -> None:
    fake = _NoEtagGcp()
    stopping = threading.Event()
    try:
        ctx = notices.WatchContext("gcp", fake.url, 30.0, lambda message: None)
        watcher = notices.GcpWatcher(ctx)
        thread = notices.start_watcher(watcher, lambda notice: None, stopping)
        assert wait_for(lambda: len(fake.requests) >= 1, 5)
        thread.join(1.0)  # a spinning watcher would send hundreds of requests meanwhile
        preempted = [r for r in fake.requests if r.path.endswith("/preempted")]
        assert len(preempted) == 1, [(r.path, r.query) for r in fake.requests]
    finally:
        stopping.set()
        fake.close()


def test_a_model_server_answering_garbage_at_first_is_probed_until_healthy(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    port = free_port()
    path, config = _setup(file_target, tmp_path, ["a", "b", "c"], command=TRIVIAL)
    config["server"] = {
        "command": [sys.executable, "-m", "tests.faults", "garbage-server", "--port", str(port), "--bad=3"],
        "url": f"http://127.0.0.1:{port}",
        "ready_timeout_s": 30,
    }
    write_config(Path(path), config)
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert agent.wait(20) == 0, agent.stderr()
    record = read_record(Store(file_target.url, {}), "r1")
    assert sorted(record.results) == ["a", "b", "c"]
    assert record.kinds() == [("start", "initial"), ("ready", None), ("stop", "done")]
    assert len(re.findall(r"health probe: check failed \(BadStatusLine", agent.stderr())) == 1  # throttled


GRACE = dict(notices.SIGTERM_GRACE_S)


@pytest.mark.parametrize("provider", sorted(GRACE))
def test_the_sigterm_deadline_is_the_providers_grace(
    provider: str, file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """No `sigterm_grace_s` in the config: the agent takes its provider's grace from the table."""
    path, _ = _setup(
        file_target,
        tmp_path,
        ["a", "b"],
        provider=provider,
        metadata_url="http://127.0.0.1:9",  # nothing answers: only SIGTERM can give notice
        price={"per_hour": 1.0},
        command=episode_command(seconds=60),
    )
    store = Store(file_target.url, {})
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: ("ready", None) in read_record(store, "r1").kinds(), 30), agent.stderr()
    agent.signal_group(signal.SIGTERM)
    assert agent.wait(30) == 0, agent.stderr()
    [notice] = [e for e in read_record(store, "r1").events if e.kind == "notice"]
    assert (notice.reason, notice.provider) == ("sigterm", provider)
    received, deadline = parse_time(notice.details["received"]), parse_time(notice.details["deadline"])
    assert deadline - received == timedelta(seconds=GRACE[provider])
    assert received <= notice.time


EPISODE_WITH_STATE = r"""
import json, os, signal, sys, time
trace, episode, output = sys.argv[1], sys.argv[2], sys.argv[3]
def term(signum, frame):
    with open(trace, "a") as f:
        f.write(f"term {episode}\n")  # a harness saving its state (inspect-ai writes its sample buffer)
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
with open(trace, "a") as f:
    f.write(f"start {episode}\n")
time.sleep(120)
"""


def test_episodes_get_sigterm_and_a_grace_before_sigkill(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    trace = tmp_path / "trace.txt"
    script = tmp_path / "episode.py"
    script.write_text(EPISODE_WITH_STATE)
    command = [sys.executable, str(script), str(trace), "{episode_id}", "{output}"]
    path, _ = _setup(
        file_target, tmp_path, [f"e{i}" for i in range(6)], concurrency=3, command=command, sigterm_grace_s=20
    )
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: _starts(trace) == 3, 30), agent.stderr()
    agent.signal_group(signal.SIGTERM)
    assert agent.wait(30) == 0, agent.stderr()
    lines = trace.read_text().splitlines()
    started = sorted(line.split()[1] for line in lines if line.startswith("start"))
    termed = sorted(line.split()[1] for line in lines if line.startswith("term"))
    assert termed == started  # each got SIGTERM and had the time to save its state
    record = read_record(Store(file_target.url, {}), "r1")
    assert sorted(record.attempts) == started
    assert all(record.outcomes(e) == ["interrupted"] for e in started)
    assert record.results == {}
