"""The agent end to end, as a process: runs, notices per provider, stop rules, timeouts, restarts."""

from __future__ import annotations

import json
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.__main__ import main
from spoteval.record import format_time, utc_now
from spoteval.sample_episode import will_fail
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    FakeAws,
    FakeAzure,
    FakeAzurePrices,
    FakeGcp,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    wait_for,
    write_config,
    write_manifest,
)

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def _setup(target: StoreTarget, tmp_path: Path, ids: list[str], **kw: Any) -> str:
    config = agent_config(target.url, target.options, "r1", tmp_path, **kw)
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    return path


def _run(agents: list[AgentProcess], path: str, tmp_path: Path) -> AgentProcess:
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    return agent


def _trace_starts(trace: Path) -> int:
    return (
        sum(1 for line in trace.read_text().splitlines() if line.startswith("start")) if trace.exists() else 0
    )


def test_a_run_records_every_attempt_result_and_event_then_stops_done(
    any_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i}" for i in range(12)]
    failing = {e for e in ids if will_fail(e, 0.25, seed=3)}
    assert 0 < len(failing) < len(ids)
    command = episode_command(seconds=0.05, fail_rate=0.25, seed=3)
    path = _setup(any_target, tmp_path, ids, command=command, price={"per_hour": 2.5}, concurrency=4)
    agent = _run(agents, path, tmp_path)
    assert agent.wait(60) == 0, agent.stderr()
    record = read_record(Store(any_target.url, any_target.options), "r1")
    assert set(record.results) == set(ids)
    for e in ids:
        if e in failing:
            assert record.results[e].outcome == "model_failure"
            assert record.outcomes(e) == ["model_failure", "model_failure"]  # max_attempts 2
            assert "failed (injected)" in (record.results[e].error or "")
        else:
            assert record.results[e].outcome == "completed"
            assert record.outcomes(e) == ["completed"]
            assert record.results[e].output["episode_id"] == e
    kinds = record.kinds()
    assert kinds[0] == ("start", "initial") and kinds[1] == ("ready", None) and kinds[-1] == ("stop", "done")
    start = record.events[0]
    assert (start.price_per_hour, start.currency, start.price_source) == (2.5, "USD", "configured")
    assert (start.provider, start.region, start.zone, start.instance_type, start.market) == (
        "local",
        "test-1",
        "test-1a",
        "gpu.1",
        "spot",
    )
    ready = next(e for e in record.events if e.kind == "ready")
    for key in ("boot_to_agent_s", "agent_to_server_healthy_s", "agent_to_first_dispatch_s"):
        assert isinstance(ready.details[key], float), key
    assert ready.details["agent_to_server_healthy_s"] <= ready.details["agent_to_first_dispatch_s"]
    assert any(e.kind == "heartbeat" and e.details.get("dispatched") for e in record.events)
    stop = record.events[-1]
    assert stop.details["counts"]["completed"] == len(ids) - len(failing)
    assert stop.details["cost"] > 0
    assert "ready:" in agent.stderr() and "stop (done)" in agent.stderr()


def test_a_restart_after_done_skips_finished_episodes(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    path = _setup(file_target, tmp_path, ["a", "b", "c"])
    assert _run(agents, path, tmp_path).wait(60) == 0
    store = Store(file_target.url, file_target.options)
    before = store.list("runs/r1/attempts/")
    assert _run(agents, path, tmp_path).wait(60) == 0
    assert store.list("runs/r1/attempts/") == before
    record = read_record(store, "r1")
    assert [k for k in record.kinds() if k[0] in ("start", "stop")] == [
        ("start", "initial"),
        ("stop", "done"),
        ("start", "restart_after_stop"),
        ("stop", "done"),
    ]


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_a_provider_notice_interrupts_in_flight_work_and_the_restart_says_preemption(
    provider: str, file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    fake: FakeAws | FakeGcp | FakeAzure = (
        FakeAws() if provider == "aws" else FakeGcp() if provider == "gcp" else FakeAzure()
    )
    prices = FakeAzurePrices()
    recorded_at_ack: list[int] = []
    store = Store(file_target.url, file_target.options)
    if isinstance(fake, FakeAzure):
        original = fake.handle

        def handle(req: Any) -> Any:
            if req.method == "POST":
                recorded_at_ack.append(len(store.list("runs/r1/attempts/")))
            return original(req)

        fake.handle = handle  # type: ignore[method-assign]
    try:
        trace = tmp_path / "trace.txt"
        ids = [f"e{i}" for i in range(6)]
        extra: dict[str, Any] = {"metadata_url": fake.url, "metadata_poll_s": 0.1 if provider != "gcp" else 5}
        if provider == "azure":
            extra["price_api_url"] = prices.url + "/api/retail/prices"
        else:
            extra["price"] = {"per_hour": 1.0}
        command = episode_command(seconds=20, trace=str(trace))
        path = _setup(file_target, tmp_path, ids, provider=provider, concurrency=3, command=command, **extra)
        agent = _run(agents, path, tmp_path)
        assert wait_for(lambda: _trace_starts(trace) == 3, 30), agent.stderr()
        if isinstance(fake, FakeAws):
            fake.interrupt("stop", seconds=30)
        elif isinstance(fake, FakeGcp):
            fake.preempt()
        else:
            fake.schedule("Preempt", seconds=30)
        assert agent.wait(30) == 0, agent.stderr()
        record = read_record(store, "r1")
        reason = {"aws": "spot_interruption", "gcp": "preempted", "azure": "scheduled_event"}[provider]
        notice = next(e for e in record.events if e.kind == "notice")
        assert notice.reason == reason
        assert sorted(x[0] for x in notice.details["in_flight"]) == ["e0", "e1", "e2"]
        interrupted = [a for e in ids for a in record.attempts.get(e, [])]
        assert [a.outcome for a in interrupted] == ["interrupted"] * 3
        assert all(a.ended >= notice.time for a in interrupted)  # the notice was durable first
        assert record.results == {}
        if provider == "azure":
            assert isinstance(fake, FakeAzure)
            assert len(fake.acks) == 1 and recorded_at_ack == [3]  # acknowledged after recording
            start = record.events[0]
            assert (start.price_per_hour, start.price_source) == (0.1578, "api")
        # the next incarnation: reason from the record, and it finishes the work
        if isinstance(fake, FakeAws):
            fake.instance_action = None
        config = json.loads(Path(path).read_text())
        config["episodes"]["command"] = episode_command(seconds=0.05)
        if isinstance(fake, FakeGcp):
            fake.preempted, fake.etag = False, "e2"  # the VM came back: not preempted
        write_config(Path(path), config)
        assert _run(agents, path, tmp_path).wait(60) == 0
        record = read_record(store, "r1")
        starts = [e for e in record.events if e.kind == "start"]
        assert starts[1].reason == "restart_after_preemption"
        assert starts[1].details["previous"]["evidence"] == f"notice:{reason}"
        assert set(record.results) == set(ids)
        assert all(r.outcome == "completed" for r in record.results.values())
        assert [a.outcome for a in record.attempts["e0"]] == ["interrupted", "completed"]
    finally:
        fake.close()
        prices.close()


GATED_EPISODE = r"""
import json, os, sys, time
from spoteval.sample_episode import will_fail
episode, output, gate, trace = sys.argv[1:5]
time.sleep(0.4)
if not os.path.exists(gate):
    with open(trace, "a") as f:
        f.write(f"blocked {episode}\n")
    while not os.path.exists(gate):
        time.sleep(0.02)
if will_fail(episode, 0.3, seed=5):
    sys.exit(1)
with open(output + ".tmp", "w") as f:
    json.dump({"episode_id": episode}, f)
os.replace(output + ".tmp", output)
"""


def test_sigterm_lets_attempts_finish_that_can_before_the_deadline(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """Attempts that usually take 0.4 s are in flight at a SIGTERM with 10 s of grace: they run on and
    end as they would have. The episodes wait at their end for a gate file, so which attempts are in
    flight at the notice, and that they end after it, does not depend on the machine's speed."""
    gate, trace, script = tmp_path / "gate", tmp_path / "trace.txt", tmp_path / "episode.py"
    gate.touch()
    script.write_text(GATED_EPISODE)
    ids = [f"e{i}" for i in range(40)]
    command = [sys.executable, str(script), "{episode_id}", "{output}", str(gate), str(trace)]
    path = _setup(file_target, tmp_path, ids, concurrency=4, command=command, sigterm_grace_s=10)
    store = Store(file_target.url, file_target.options)
    agent = _run(agents, path, tmp_path)
    assert wait_for(lambda: len(store.list("runs/r1/results/")) >= 6, 60), agent.stderr()
    gate.unlink()

    def blocked() -> list[str]:
        return sorted(line.split()[1] for line in trace.read_text().splitlines()) if trace.exists() else []

    assert wait_for(lambda: len(blocked()) == 4, 60), agent.stderr()
    agent.signal_group(signal.SIGTERM)
    assert wait_for(lambda: any(e.kind == "notice" for e in read_record(store, "r1").events), 30)
    gate.touch()  # the four in flight end now, after the notice is recorded
    assert agent.wait(30) == 0, agent.stderr()
    record = read_record(store, "r1")
    notice = next(e for e in record.events if e.kind == "notice")
    assert notice.reason == "sigterm"
    assert set(blocked()) <= {x[0] for x in notice.details["in_flight"]}  # (and any not yet durable)
    after = [a for items in record.attempts.values() for a in items if a.ended > notice.time]
    assert sorted(a.episode_id for a in after) == blocked()  # they ran on past the notice
    for a in after:  # and each ended as it would have without the notice
        assert a.outcome == ("model_failure" if will_fail(a.episode_id, 0.3, seed=5) else "completed")
    assert not any(a.outcome == "interrupted" for items in record.attempts.values() for a in items)
    assert record.kinds()[-1] == ("notice", "sigterm")


def test_an_episode_past_its_timeout_is_a_model_failure(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    path = _setup(
        file_target, tmp_path, ["slow"], command=episode_command(seconds=30), timeout_s=0.5, max_attempts=1
    )
    assert _run(agents, path, tmp_path).wait(60) == 0
    record = read_record(Store(file_target.url, file_target.options), "r1")
    result = record.results["slow"]
    assert result.outcome == "model_failure" and result.error == "timed out after 0.5 s"


def test_budget_stop_interrupts_work_and_runs_the_power_off_command(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    marker = tmp_path / "powered-off"
    script = tmp_path / "poweroff.sh"
    script.write_text(f"#!/bin/sh\necho off > {marker}\n")
    script.chmod(0o755)
    path = _setup(
        file_target,
        tmp_path,
        ["a", "b"],
        command=episode_command(seconds=60),
        price={"per_hour": 3600.0},  # one unit a second: episodes start well before the budget ends
        stop_rules={"budget": 10.0, "on_done": "poweroff", "poweroff_command": [str(script)]},
    )
    agent = _run(agents, path, tmp_path)
    assert agent.wait(60) == 0, agent.stderr()
    assert marker.read_text() == "off\n"
    record = read_record(Store(file_target.url, file_target.options), "r1")
    stop = record.events[-1]
    assert (stop.kind, stop.reason) == ("stop", "stop_rule:budget")
    assert stop.details["spent"] >= 10.0 and stop.details["budget"] == 10.0
    assert record.outcomes("a") == ["interrupted"] and record.outcomes("b") == ["interrupted"]
    assert record.results == {}


def test_max_runtime_counts_earlier_incarnations(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    path = _setup(
        file_target,
        tmp_path,
        ["a"],
        command=episode_command(seconds=30),
        stop_rules={"max_runtime_s": 8.0},
        sigterm_grace_s=2,
    )
    first = _run(agents, path, tmp_path)
    store = Store(file_target.url, file_target.options)
    assert wait_for(lambda: len(store.list("runs/r1/events/")) >= 4, 30)
    first.signal_group(signal.SIGTERM)
    assert first.wait(30) == 0
    second = _run(agents, path, tmp_path)
    assert second.wait(30) == 0
    record = read_record(store, "r1")
    stop = record.events[-1]
    assert (stop.kind, stop.reason) == ("stop", "stop_rule:max_runtime")
    assert stop.details["uptime_s"] >= 8.0 and stop.details["max_runtime_s"] == 8.0
    second_start = [e for e in record.events if e.kind == "start"][1]
    alone = (stop.time - second_start.time).total_seconds()
    assert alone < stop.details["uptime_s"]  # the first incarnation's time counted too


def test_a_model_server_that_never_gets_healthy_stops_the_run_idle(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    config_path = _setup(file_target, tmp_path, ["a"])
    config = json.loads(Path(config_path).read_text())
    config["server"]["command"] = [sys.executable, "-c", "import time; time.sleep(60)"]
    config["server"]["ready_timeout_s"] = 1
    write_config(Path(config_path), config)
    agent = _run(agents, config_path, tmp_path)
    assert agent.wait(60) == 1
    record = read_record(Store(file_target.url, file_target.options), "r1")
    stop = record.events[-1]
    assert (stop.kind, stop.reason) == ("stop", "stop_rule:idle")
    assert "not healthy" in stop.details["error"]
    assert record.attempts == {}


def test_the_boot_file_gives_the_boot_phase_timings(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    now = utc_now()
    boot = {
        "boot_time": format_time(now - timedelta(seconds=100)),
        "startup_script_started": format_time(now - timedelta(seconds=40)),
    }
    (tmp_path / "boot.json").write_text(json.dumps(boot))
    path = _setup(
        file_target, tmp_path, ["a"], provider="aws", metadata_url="http://127.0.0.1:9", price={"per_hour": 1}
    )
    assert _run(agents, path, tmp_path).wait(60) == 0
    record = read_record(Store(file_target.url, file_target.options), "r1")
    ready = next(e for e in record.events if e.kind == "ready")
    assert ready.details["boot_source"] == "boot_file"
    start = record.events[0]
    assert (
        100
        <= ready.details["boot_to_agent_s"]
        <= (start.time - (now - timedelta(seconds=100))).total_seconds()
    )
    assert ready.details["boot_to_startup_script_s"] == pytest.approx(60.0, abs=0.001)  # both from the file
    assert start.details["billed_from"] == boot["boot_time"]  # a VM bills from boot
    assert record.events[-1].details["uptime_s"] >= 100


def test_heartbeats_keep_coming_while_episodes_run(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    # two 1.5 s episodes one after the other, a heartbeat every 0.2 s: periodic heartbeats (not the
    # journal written at each dispatch) bound the node's life in the record while nothing else happens
    command = episode_command(seconds=1.5)
    path = _setup(file_target, tmp_path, ["a", "b"], command=command, concurrency=1, heartbeat_s=0.2)
    agent = _run(agents, path, tmp_path)
    assert agent.wait(60) == 0, agent.stderr()
    record = read_record(Store(file_target.url, file_target.options), "r1")
    periodic = [e for e in record.events if e.kind == "heartbeat" and "dispatched" not in e.details]
    assert len(periodic) >= 5, [e.details for e in record.events if e.kind == "heartbeat"]
    assert all("in_flight" in e.details and "uptime_s" in e.details for e in periodic)
