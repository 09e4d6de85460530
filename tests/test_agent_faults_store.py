"""The agent as a process under store faults, through a proxy in front of moto S3 or Azurite that the
test cuts, makes deny every request, or makes refuse writes: an outage mid-run, at boot, at the end
and longer than the flush timeout, a notice during recovery, a 403, a full spool disk, a panic inside
obstore, and two agents racing on the same episodes. Each checks the exact record afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.__main__ import main
from spoteval.agent.config import STORE_DEFAULTS
from spoteval.agent.rules import outage_backlog
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import (
    AgentProcess,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    tagged_pids,
    wait_for,
    write_config,
    write_manifest,
)
from tests.faults import (
    GatedPrices,
    StoreFront,
    attempt_name,
    start_agent_via,
    start_atomic_moto,
    tmpfs,
    traced_attempts,
)

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

TRIVIAL = ["sh", "-c", 'echo \'{"ok": true, "id": "{episode_id}"}\' > {output}']


class Bench:
    """A fresh bucket (moto) or container (Azurite) behind a StoreFront, and a direct client."""

    def __init__(self, kind: str, server: servers.Server) -> None:
        name = f"t{os.urandom(6).hex()}"
        self.front = StoreFront(server.port)
        if kind == "s3":
            servers.create_s3_bucket(server, name)
            self.url = f"s3://{name}/evals"
            direct = servers.s3_store_options(server)
            self.options: dict[str, Any] = {**STORE_DEFAULTS, **direct, "endpoint": self.front.url}
        else:
            servers.create_azure_container(server, name)
            self.url = f"az://{name}/evals"
            direct = servers.azure_store_options(server)
            endpoint = f"{self.front.url}/{servers.AZURITE_ACCOUNT}"
            self.options = {**STORE_DEFAULTS, **direct, "endpoint": endpoint}
        self.direct = Store(self.url, direct)

    def results(self, run_id: str = "r1") -> int:
        return len(self.direct.list(f"runs/{run_id}/results/"))


@pytest.fixture
def s3_bench(moto_server: servers.Server) -> Iterator[Bench]:
    bench = Bench("s3", moto_server)
    yield bench
    bench.front.close()


@pytest.fixture(scope="module")
def atomic_moto() -> Iterator[servers.Server]:
    server = start_atomic_moto()
    yield server
    server.stop()


@pytest.fixture(params=["s3", "az"])
def race_bench(request: pytest.FixtureRequest) -> Iterator[Bench]:
    """For racing writers: moto with its create-only PUT made atomic, as S3's is (tests/atomic_moto.py)."""
    server = request.getfixturevalue("atomic_moto" if request.param == "s3" else "azurite_server")
    made = Bench(request.param, server)
    yield made
    made.front.close()


@pytest.fixture(params=["s3", "az"])
def bench(request: pytest.FixtureRequest) -> Iterator[Bench]:
    server = request.getfixturevalue("moto_server" if request.param == "s3" else "azurite_server")
    made = Bench(request.param, server)
    yield made
    made.front.close()


def _setup(bench: Bench, tmp_path: Path, ids: list[str], **kw: Any) -> tuple[str, dict[str, Any]]:
    config = agent_config(bench.url, bench.options, "r1", tmp_path, **kw)
    path = write_config(tmp_path / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    return path, config


def _trace(path: Path) -> tuple[Counter[str], Counter[str]]:
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            kind, episode = line.split()[:2]
            (starts if kind == "start" else ends)[episode] += 1
    return starts, ends


def _only_agent_left(agent: AgentProcess) -> bool:
    return set(tagged_pids(agent.tag)) == {agent.proc.pid}


def _stops(record: Any) -> list[Any]:
    return [e for e in record.events if e.kind == "stop"]


# --- outages --------------------------------------------------------------------------------------


def test_an_outage_mid_run_loses_and_doubles_nothing(
    bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(30)]
    path, _ = _setup(bench, tmp_path, ids, concurrency=4, command=episode_command(seconds=0.1))
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: bench.results() >= 6, 60), agent.stderr()
    bench.front.set("cut")
    assert wait_for(lambda: "store did not answer" in agent.stderr(), 20), agent.stderr()
    time.sleep(1.0)
    bench.front.set("pass")
    assert agent.wait(90) == 0, agent.stderr()
    record = read_record(bench.direct, "r1")
    assert sorted(record.results) == ids
    assert all(record.outcomes(e) == ["completed"] for e in ids)
    [stop] = _stops(record)
    assert stop.reason == "done" and record.events[-1] is stop
    assert stop.details["counts"]["results"] == len(ids)  # each result counted once, by its writer
    assert stop.details["counts"]["completed"] == len(ids)


def test_an_outage_at_boot_with_a_spool_left_behind_reruns_nothing(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    """The first agent finishes episodes during an outage and is SIGKILLed with them in its spool;
    the next one boots while the store takes no writes (reads work), so it reads the record before
    its spool is uploaded: the attempts in its spool are not lost ones, and their episodes do not
    run again."""
    trace = tmp_path / "trace.txt"
    ids = [f"e{i:02d}" for i in range(16)]
    path, _ = _setup(
        s3_bench,
        tmp_path,
        ids,
        concurrency=4,
        command=episode_command(seconds=0.3, trace=str(trace)),
    )
    first = start_agent(path, tmp_path)
    agents.append(first)
    assert wait_for(lambda: s3_bench.results() >= 4, 60), first.stderr()
    s3_bench.front.set("cut")
    assert wait_for(lambda: sum(_trace(trace)[1].values()) >= 10, 30), first.stderr()  # ended meanwhile
    first.signal_all(signal.SIGKILL)
    first.wait(10)
    durable = set(read_record(s3_bench.direct, "r1").results)
    starts, _ = _trace(trace)
    spool = tmp_path / "spool" / "r1"
    docs = [json.loads((spool / n).read_text()) for n in os.listdir(spool) if n.endswith(".json")]
    spooled = {d["payload"]["episode_id"] for d in docs if d["kind"] == "attempt"} - durable
    assert spooled  # completed, only in the spool
    s3_bench.front.set("fail_writes")
    second = start_agent(path, tmp_path)
    agents.append(second)
    assert wait_for(lambda: "start (" in second.stderr() or second.proc.poll() is not None, 30)
    time.sleep(3.0)  # the record is read, the spool still waits for the store
    s3_bench.front.set("pass")
    assert second.wait(90) == 0, second.stderr()
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids, second.stderr()
    first = record.events[0].details["incarnation"]
    journal = [e for e in record.events if e.details.get("incarnation") == first and "in_flight" in e.details]
    in_flight = {x[0] for x in journal[-1].details["in_flight"]}  # what it had not recorded, at the end
    assert {e for e in starts if e not in durable | spooled} <= in_flight
    for e in ids:
        if e in durable or e in spooled:  # recorded by the first incarnation: never run again
            expected = ["completed"]
        elif e in in_flight:  # started by the first, not recorded (killed, or ended as the node went)
            expected = ["interrupted", "completed"]
        else:
            expected = ["completed"]
        assert record.outcomes(e) == expected, (e, [(a.error, a.details) for a in record.attempts[e]])


def test_the_model_server_is_stopped_while_the_agent_waits_for_the_store_at_boot(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    prices = GatedPrices()
    prices.gate.clear()
    try:
        ids = [f"e{i}" for i in range(6)]
        path, _ = _setup(
            s3_bench,
            tmp_path,
            ids,
            provider="azure",
            metadata_url="http://127.0.0.1:9",
            price_api_url=prices.url + "/api/retail/prices",
            command=episode_command(seconds=0.1),
        )
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert prices.asked.wait(30), agent.stderr()
        s3_bench.front.set("cut")  # the record cannot be read
        prices.gate.set()
        assert wait_for(lambda: "reading the run record" in agent.stderr(), 20), agent.stderr()
        assert wait_for(lambda: _only_agent_left(agent), 10), agent.stderr()  # no idle model server
        s3_bench.front.set("pass")
        assert agent.wait(60) == 0, agent.stderr()
        record = read_record(s3_bench.direct, "r1")
        assert sorted(record.results) == ids
        assert record.kinds() == [("start", "initial"), ("ready", None), ("stop", "done")]
    finally:
        prices.gate.set()
        prices.close()


def test_a_run_ending_in_an_outage_longer_than_the_flush_timeout_does_not_power_off(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    marker = tmp_path / "powered-off"
    script = tmp_path / "poweroff.sh"
    script.write_text(f"#!/bin/sh\necho off >> {marker}\n")
    script.chmod(0o755)
    trace = tmp_path / "trace.txt"
    ids = [f"e{i:02d}" for i in range(12)]
    path, _ = _setup(
        s3_bench,
        tmp_path,
        ids,
        concurrency=4,
        flush_timeout_s=4,
        command=episode_command(seconds=0.5, trace=str(trace)),
        stop_rules={"on_done": "poweroff", "poweroff_command": [str(script)]},
    )
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: s3_bench.results() >= 4, 60), agent.stderr()
    s3_bench.front.set("cut")
    assert wait_for(lambda: sum(_trace(trace)[1].values()) == len(ids), 30), agent.stderr()
    assert wait_for(lambda: _only_agent_left(agent), 10), agent.stderr()  # waits with the server stopped
    assert agent.wait(30) == 1, agent.stderr()
    assert not marker.exists()
    assert len(re.findall(r"only in the spool", agent.stderr())) == 1, agent.stderr()
    left = os.listdir(tmp_path / "spool" / "r1")
    assert left
    durable = read_record(s3_bench.direct, "r1")
    assert _stops(durable) == []  # never `done` while a result is only in the spool
    s3_bench.front.set("pass")
    again = start_agent(path, tmp_path)
    agents.append(again)
    assert again.wait(60) == 0, again.stderr()
    assert marker.read_text() == "off\n"
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids
    assert all(record.outcomes(e) == ["completed"] for e in ids)
    assert [s.reason for s in _stops(record)] == ["done"]


def test_a_notice_during_recovery_with_the_store_down_is_handled(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    prices = GatedPrices()
    prices.gate.clear()
    try:
        ids = [f"e{i}" for i in range(4)]
        path, _ = _setup(
            s3_bench,
            tmp_path,
            ids,
            provider="azure",
            metadata_url="http://127.0.0.1:9",
            price_api_url=prices.url + "/api/retail/prices",
            sigterm_grace_s=15,
            command=episode_command(seconds=0.1),
        )
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert prices.asked.wait(30), agent.stderr()
        s3_bench.front.set("cut")
        prices.gate.set()
        assert wait_for(lambda: "reading the run record" in agent.stderr(), 20), agent.stderr()
        agent.signal_group(signal.SIGTERM)
        time.sleep(1.0)
        s3_bench.front.set("pass")  # back within the notice: the notice event gets through
        assert agent.wait(30) == 0, agent.stderr()
        assert "Traceback" not in agent.stderr()
        assert tagged_pids(agent.tag) == []  # the model server is stopped
        record = read_record(s3_bench.direct, "r1")
        assert record.kinds() == [("notice", "sigterm")]
        assert record.attempts == {} and record.results == {}
        again = start_agent(path, tmp_path)
        agents.append(again)
        assert again.wait(60) == 0, again.stderr()
        record = read_record(s3_bench.direct, "r1")
        starts = [e for e in record.events if e.kind == "start"]
        assert [s.reason for s in starts] == ["restart_after_preemption"]
        assert starts[0].details["previous"]["evidence"] == "notice:sigterm"
        assert sorted(record.results) == ids
    finally:
        prices.gate.set()
        prices.close()


# --- permanent errors, a full disk, a panic ----------------------------------------------------------


def test_a_store_that_denies_access_ends_the_run_with_the_reason(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    trace = tmp_path / "trace.txt"
    ids = [f"e{i:02d}" for i in range(20)]
    path, _ = _setup(
        s3_bench, tmp_path, ids, concurrency=4, command=episode_command(seconds=2.0, trace=str(trace))
    )
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: s3_bench.results() >= 4, 60), agent.stderr()
    s3_bench.front.set("deny")
    before = read_record(s3_bench.direct, "r1")
    assert agent.wait(30) == 1, agent.stderr()
    assert len(re.findall(r"store refuses .*: .*privileges", agent.stderr())) == 1, agent.stderr()
    assert read_record(s3_bench.direct, "r1") == before  # nothing more got in
    assert tagged_pids(agent.tag) == []
    s3_bench.front.set("pass")
    again = start_agent(path, tmp_path)
    agents.append(again)
    assert again.wait(90) == 0, again.stderr()
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids
    traced = traced_attempts(trace)
    for e in ids:
        *stopped, last = record.attempts[e]
        assert last.outcome == "completed" and record.results[e].attempt == last.attempt
        for a in stopped:  # killed by the agent when the store refused: in its trace, no end, or the
            assert a.outcome == "interrupted", (e, record.outcomes(e))  # instant after its last line
            name = attempt_name(a)
            assert (
                name not in traced
                or traced[name][1] is None
                or (a.error or "").startswith("killed by the agent")
            ), (name, traced.get(name), a.error)
    killed = {name for name, (_, code) in traced.items() if code is None}
    assert killed <= {
        attempt_name(a) for v in record.attempts.values() for a in v if a.outcome == "interrupted"
    }


def test_a_full_spool_disk_pauses_dispatch_instead_of_crashing(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    with tmpfs(tmp_path / "spool", "96k") as problem:
        if problem is not None:
            pytest.skip(f"no small disk for the spool: {problem}")
        ids = [f"e{i:03d}" for i in range(60)]
        path, _ = _setup(s3_bench, tmp_path, ids, concurrency=4, command=TRIVIAL, heartbeat_s=0.5)
        agent = start_agent(path, tmp_path)
        agents.append(agent)
        assert wait_for(lambda: s3_bench.results() >= 2, 60), agent.stderr()
        s3_bench.front.set("cut")
        full = wait_for(lambda: "spool disk full" in agent.stderr() or agent.proc.poll() is not None, 40)
        assert full and agent.proc.poll() is None, agent.stderr()
        s3_bench.front.set("pass")
        assert agent.wait(120) == 0, agent.stderr()
        assert "Traceback" not in agent.stderr()
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids
    assert all(record.outcomes(e) == ["completed"] for e in ids)
    [stop] = _stops(record)
    assert stop.reason == "done" and stop.details["counts"]["results"] == len(ids)


def test_a_panic_inside_obstore_loses_no_result(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i}" for i in range(10)]
    path, _ = _setup(s3_bench, tmp_path, ids, concurrency=2, command=TRIVIAL, flush_timeout_s=5)
    agent = start_agent_via("tests.faulty_agent", path, tmp_path, args=["--panics", "2"])
    agents.append(agent)
    assert agent.wait(60) == 0, agent.stderr()
    assert agent.stderr().count("faulty_agent: panicking") == 2
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids
    assert all(record.outcomes(e) == ["completed"] for e in ids)
    [stop] = _stops(record)
    assert stop.details["counts"]["results"] == len(ids)


def test_an_outage_keeps_the_spool_bounded(
    s3_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:04d}" for i in range(400)]
    path, _ = _setup(s3_bench, tmp_path, ids, concurrency=2, command=TRIVIAL, heartbeat_s=0.2)
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: s3_bench.results() >= 2, 60), agent.stderr()
    s3_bench.front.set("cut")
    spool = tmp_path / "spool" / "r1"

    def kinds() -> Counter[str]:
        return Counter(n.rsplit("-", 1)[-1] for n in os.listdir(spool) if n.endswith(".json"))

    bound = outage_backlog(2)
    assert wait_for(lambda: kinds()["attempt.json"] >= bound, 90), agent.stderr()
    time.sleep(1.0)  # dispatch has stopped: nothing more is added, heartbeats replace each other
    held = kinds()
    assert held["attempt.json"] == bound
    heartbeats = [n for n in os.listdir(spool) if n.endswith("event.json")]
    docs = [json.loads((spool / n).read_text())["payload"] for n in heartbeats]
    assert [d["kind"] for d in docs].count("heartbeat") == 1
    s3_bench.front.set("pass")
    assert agent.wait(120) == 0, agent.stderr()
    record = read_record(s3_bench.direct, "r1")
    assert sorted(record.results) == ids
    assert all(record.outcomes(e) == ["completed"] for e in ids)


# --- two agents on the same episodes -----------------------------------------------------------------


def test_two_agents_racing_on_the_same_episodes_record_each_result_once(
    race_bench: Bench, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    bench = race_bench
    prices = GatedPrices()
    prices.gate.clear()  # both agents wait at the price lookup, then read the (empty) record together
    try:
        ids = [f"e{i:02d}" for i in range(12)]
        paths = []
        for node in ("n1", "n2"):
            work = tmp_path / node
            work.mkdir()
            config = agent_config(
                bench.url,
                bench.options,
                "r1",
                work,
                node=node,
                provider="azure",
                metadata_url="http://127.0.0.1:9",
                price_api_url=prices.url + "/api/retail/prices",
                concurrency=4,
                command=episode_command(seconds=0.3),
            )
            paths.append(write_config(work / "agent.json", config))
        assert main(["manifest", "--config", paths[0], write_manifest(tmp_path / "m.jsonl", ids)]) == 0
        racing = [start_agent(p, tmp_path) for p in paths]
        agents.extend(racing)
        assert wait_for(lambda: len([r for r in prices.requests if r.query.get("page") != "2"]) == 2, 30)
        prices.gate.set()
        assert [a.wait(90) for a in racing] == [0, 0], [a.stderr() for a in racing]
    finally:
        prices.gate.set()
        prices.close()
    record = read_record(bench.direct, "r1")
    assert sorted(record.results) == ids
    for e in ids:  # both ran it: two attempts, numbered 1 and 2, one result
        assert record.outcomes(e) == ["completed", "completed"]
        assert record.results[e].attempt in (1, 2)
    stops = _stops(record)
    assert sorted(s.node for s in stops) == ["n1", "n2"]
    assert sum(s.details["counts"]["results"] for s in stops) == len(ids)
    assert [s.details["counts"]["completed"] for s in stops] == [len(ids), len(ids)]
