"""Agents of one run as a pool (the config's `pool` section), as processes, on moto S3 and Azurite:
each episode has exactly one result, and completed attempts beyond one per episode stay within a
stated bound (zero without a lost node; at most the lost node's concurrency with one)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from spoteval.claims import PoolLayout
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import AgentProcess, episode_command, read_record, start_agent, wait_for
from tests.pool_kit import POOL, completed, documents, pool_node

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def _node(target: StoreTarget, tmp_path: Path, node: str, ids: list[str], **kw: Any) -> str:
    return pool_node(target, tmp_path, "pool1", node, ids, **kw)


def _start(agents: list[AgentProcess], path: str) -> AgentProcess:
    agent = start_agent(path, Path(path).parent)
    agents.append(agent)
    return agent


def _chunks(target: StoreTarget) -> list[tuple[str, dict[str, Any]]]:
    return documents(Store(target.url, target.options), PoolLayout("pool1").chunks_prefix())


def _claim_ops(target: StoreTarget) -> list[tuple[str, str]]:
    return [(doc["op"], doc["node"]) for _, doc in _chunks(target)]


def _taken_over_holders(target: StoreTarget) -> dict[str, str]:
    """Every holder whose episodes another node took over after its lease expired -> its node."""
    docs = [doc for _, doc in _chunks(target)]
    node_of = {doc["holder"]: doc["node"] for doc in docs}
    return {
        doc["from"]: node_of.get(doc["from"], "?") for doc in docs if doc["op"] == "takeover" and doc["from"]
    }


def _next_holder(holder: str) -> str:
    """The holder id a fenced holder rejoins under (`{node}.{incarnation}-2`, then `-3`, ...)."""
    base, _, generation = holder.rpartition("-")
    return f"{base}-{int(generation) + 1}" if generation.isdigit() else f"{holder}-2"


def _stolen(target: StoreTarget) -> list[str]:
    out = []
    for key, doc in _chunks(target):
        if doc["op"] == "steal":
            c = int(key.split("/")[-2])
            out += [f"e{c * 6 + i:02d}" for a, b in doc["ranges"] for i in range(a, b)]
    return out


def test_two_agents_share_the_episodes_and_run_each_once(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(48)]
    command = episode_command(seconds=0.05, max_seconds=0.2)
    paths = [_node(s3_or_azure_target, tmp_path, node, ids, command=command) for node in ("a", "b")]
    procs = [_start(agents, p) for p in paths]
    for proc in procs:
        assert proc.wait(120) == 0, proc.stderr()
    record = read_record(Store(s3_or_azure_target.url, s3_or_azure_target.options), "pool1")
    assert sorted(record.results) == ids
    assert completed(record) == 48  # no node lost: nothing runs twice
    by_node = {n: sum(1 for r in record.results.values() if r.node == n) for n in ("a", "b")}
    assert sum(by_node.values()) == 48 and min(by_node.values()) > 0
    claims = [node for op, node in _claim_ops(s3_or_azure_target) if op == "claim"]
    assert len(claims) == 8  # 48 episodes in chunks of 6: eight claims, one winner each
    assert [k for k in record.kinds() if k[0] == "stop"] == [("stop", "done"), ("stop", "done")]
    starts = [e for e in record.events if e.kind == "start"]
    assert [e.details["pool"] for e in starts] == [POOL, POOL]  # the run-wide rules apply (billing.is_pool)


def test_three_agents_one_lost_for_good_and_one_added_with_a_new_id(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(60)]
    command = episode_command(seconds=0.3, max_seconds=0.6)
    paths = {
        n: _node(s3_or_azure_target, tmp_path, n, ids, command=command, concurrency=3)
        for n in ("a", "b", "c", "d")
    }
    procs = {n: _start(agents, paths[n]) for n in ("a", "b", "c")}
    store = Store(s3_or_azure_target.url, s3_or_azure_target.options)
    assert wait_for(lambda: len(store.list("runs/pool1/results/")) >= 9, 60)
    procs["c"].signal_all(signal.SIGKILL)  # lost without a word, never restarted
    procs["d"] = _start(agents, paths["d"])  # a replacement nobody knew
    for n in ("a", "b", "d"):
        assert procs[n].wait(180) == 0, procs[n].stderr()
    record = read_record(store, "pool1")
    assert sorted(record.results) == ids
    # nothing completes twice: what c finished (its attempt written, its result maybe not) is kept;
    # a live holder whose renewals came later than the expiry on a loaded machine gives up what was
    # taken over from it
    assert completed(record) == 60
    cut = _taken_over_holders(s3_or_azure_target)
    assert any(node == "c" for node in cut.values())
    ops = _claim_ops(s3_or_azure_target)
    assert any(op == "takeover" for op, node in ops)  # the lost node's episodes were taken over
    lost = [a for attempts in record.attempts.values() for a in attempts if a.details.get("lost")]
    assert lost and all(a.node == "c" and a.outcome == "interrupted" for a in lost)  # recorded by the takers
    assert all(record.results[a.episode_id].node != "c" for a in lost)
    leases = [json.loads(store.get(k) or b"{}") for k in store.list(PoolLayout("pool1").prefix + "leases/")]
    expired = {lease["holder"] for lease in leases if lease.get("end") == "expired"}
    holders = {
        json.loads(store.get(k) or b"{}")["holder"]
        for k in store.list(PoolLayout("pool1").prefix + "holders/")
    }
    assert sum(h.startswith("c.") for h in expired) == 1  # the lost node's, ended after the expiry
    assert all(_next_holder(h) in holders for h in expired if not h.startswith("c."))  # live: rejoined
    assert [lease.get("end") for lease in leases].count("released") == 3


def test_a_slow_node_at_the_end_has_its_unstarted_episodes_stolen(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(24)]
    slow = _node(
        s3_or_azure_target, tmp_path, "slow", ids, command=episode_command(seconds=3.0), concurrency=1
    )
    fast = _node(
        s3_or_azure_target, tmp_path, "fast", ids, command=episode_command(seconds=0.05), concurrency=4
    )
    first = _start(agents, slow)
    store = Store(s3_or_azure_target.url, s3_or_azure_target.options)
    assert wait_for(lambda: bool(store.list(PoolLayout("pool1").chunks_prefix())), 60)
    second = _start(agents, fast)
    assert second.wait(120) == 0, second.stderr()
    assert first.wait(120) == 0, first.stderr()
    record = read_record(store, "pool1")
    assert sorted(record.results) == ids
    assert completed(record) == 24
    slow_ran = sorted(e for e, r in record.results.items() if r.node == "slow")
    assert 0 < len(slow_ran) < 6  # it claimed one chunk of 6 and kept only what it had started
    stolen = _stolen(s3_or_azure_target)
    assert stolen and not set(stolen) & set(slow_ran)  # what was stolen ran on the fast node only
    assert all(record.results[e].node == "fast" for e in stolen)


def test_a_budget_bounds_the_money_of_all_nodes_together(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(200)]
    rules = {"budget": 12.0}  # at 3600 USD per hour per node: 12 s of one node, 6 s of two
    common: dict[str, Any] = {"price": {"per_hour": 3600.0}, "stop_rules": rules}
    command = episode_command(seconds=0.5)
    paths = [
        _node(s3_or_azure_target, tmp_path, n, ids, command=command, concurrency=1, **common)
        for n in ("a", "b")
    ]
    procs = [_start(agents, p) for p in paths]
    for proc in procs:
        assert proc.wait(120) == 0, proc.stderr()
    record = read_record(Store(s3_or_azure_target.url, s3_or_azure_target.options), "pool1")
    stops = [e for e in record.events if e.kind == "stop"]
    assert [e.reason for e in stops] == ["stop_rule:budget", "stop_rule:budget"]
    # each node stopped once the pool's money, as it saw it, reached the budget: its own part and
    # what the other node's leases said it had spent (the money spent while stopping comes after)
    assert all(
        stop.details["spent"] >= 12.0 > 0 and stop.details["own"] < stop.details["spent"] for stop in stops
    )
    store = Store(s3_or_azure_target.url, s3_or_azure_target.options)
    finals = {}
    for key in store.list(PoolLayout("pool1").prefix + "leases/"):
        lease = json.loads(store.get(key) or b"{}")
        if lease["end"] == "released":
            finals[lease["node"]] = lease["state"]["totals"]["cost"]
    assert sorted(finals) == ["a", "b"]
    assert sum(finals.values()) >= 12.0


def test_a_pool_node_restarted_after_a_kill_finds_its_lost_attempts_in_its_lease(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(12)]
    path = _node(s3_or_azure_target, tmp_path, "a", ids, command=episode_command(seconds=1.0), concurrency=3)
    first = _start(agents, path)
    store = Store(s3_or_azure_target.url, s3_or_azure_target.options)
    assert wait_for(lambda: len(store.list("runs/pool1/results/")) >= 3, 60)
    first.signal_all(signal.SIGKILL)
    first.wait(10)
    second = _start(agents, path)
    assert second.wait(120) == 0, second.stderr()
    record = read_record(store, "pool1")
    assert sorted(record.results) == ids
    starts = [e for e in record.events if e.kind == "start"]
    assert [e.reason for e in starts] == ["initial", "restart_after_preemption"]
    assert starts[1].details["previous"]["evidence"] == "lost"
    lost = [a for attempts in record.attempts.values() for a in attempts if a.details.get("lost")]
    assert len(lost) == starts[1].details["recovered"]["lost_attempts"]
    assert all(a.outcome == "interrupted" and a.node == "a" for a in lost)
    assert completed(record) == 12
