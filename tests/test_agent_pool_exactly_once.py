"""Exactly once in a pool of three real agents (processes, moto S3 and Azurite): a node lost between
its attempt write and its result write loses no finished work, and a holder paused past its lease
expiry gives up what was taken over. In both cases every episode has one result and no episode
completes twice (spoteval/claims/takeover.py states the rules and the one bound), and every ended
attempt is recorded exactly once."""

from __future__ import annotations

import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spoteval.claims import PoolLayout
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    RunRecord,
    episode_command,
    read_record,
    signal_tagged,
    start_agent,
    wait_for,
)
from tests.faults import start_agent_via
from tests.pool_kit import all_attempts, documents, pool_node

pytestmark = pytest.mark.timing

RUN = "once"
LAYOUT = PoolLayout(RUN)


def _nodes(target: StoreTarget, tmp_path: Path, ids: list[str], **kw: Any) -> dict[str, str]:
    return {node: pool_node(target, tmp_path, RUN, node, ids, **kw) for node in ("a", "b", "c")}


def _check_once(record: RunRecord, ids: list[str]) -> None:
    """One result per episode, no episode completed twice, every attempt recorded once."""
    assert sorted(record.results) == ids
    completed = Counter(a.episode_id for a in all_attempts(record) if a.outcome == "completed")
    assert sum(n - 1 for n in completed.values()) == 0  # completed attempts beyond one per episode
    runs = Counter((a.details["incarnation"], a.details["dispatch"]) for a in all_attempts(record))
    assert [run for run, n in runs.items() if n > 1] == []
    for episode, result in record.results.items():  # the result is one of the episode's attempts
        same = [(a.attempt, a.node, a.outcome, a.started) for a in record.attempts[episode]]
        assert (result.attempt, result.node, result.outcome, result.started) in same


def _fenced_alive(store: Store) -> set[str]:
    """Holders whose lease another node ended while they ran (a loaded machine can delay renewals past
    the expiry): each rejoined under the next holder id (`-2`, `-3`, ...)."""
    holders = {d["holder"] for _, d in documents(store, LAYOUT.prefix + "holders/")}
    out = set()
    for holder in holders:
        base, _, generation = holder.rpartition("-")
        if generation.isdigit():
            out.add(base if generation == "2" else f"{base}-{int(generation) - 1}")
    return out


def test_a_node_killed_between_its_attempt_and_its_result_loses_no_finished_work(
    s3_or_azure_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(48)]
    command = episode_command(seconds=0.3, max_seconds=0.6)
    paths = _nodes(s3_or_azure_target, tmp_path, ids, command=command, concurrency=3)
    dies = ["--die-before-result", "4"]
    lost = start_agent_via("tests.faulty_agent", paths["c"], tmp_path / "c", args=dies)
    agents.append(lost)
    survivors = [start_agent(paths[n], tmp_path / n) for n in ("a", "b")]
    agents.extend(survivors)
    assert lost.wait(120) == -signal.SIGKILL, lost.stderr()
    lost.signal_all(signal.SIGKILL)  # its episodes and model server go with it: the node is lost
    for proc in survivors:
        assert proc.wait(180) == 0, proc.stderr()
    store = Store(s3_or_azure_target.url, s3_or_azure_target.options)
    record = read_record(store, RUN)
    _check_once(record, ids)
    [dying] = re.findall(r"dying before results/(\S+)\.json", lost.stderr())
    # the lost node completed it and wrote the attempt, not the result: a survivor wrote the result
    # from that attempt instead of running the episode again
    assert [(a.node, a.outcome) for a in record.attempts[dying]] == [("c", "completed")]
    assert record.results[dying].node == "c"
    taken = [d for _, d in documents(store, LAYOUT.chunks_prefix()) if d["op"] == "takeover"]
    assert any(d["from"].startswith("c.") for d in taken)
    assert all(d["node"] in ("a", "b") for d in taken)
    # a survivor's lease that the other survivor ended (a loaded machine delayed its renewals) is
    # learned at its next renewal, which fences it and rejoins it under the next holder id; a
    # survivor that ran out of work before renewing again never learns it, and only stops
    stderr = {"a": survivors[0].stderr(), "b": survivors[1].stderr()}
    for holder in {d["from"] for d in taken if not d["from"].startswith("c.")}:
        learned = f"holder {holder} was ended by" in stderr[holder.split(".", 1)[0]]
        assert (holder in _fenced_alive(store)) == learned, (holder, stderr)
    lost_runs = [a for a in all_attempts(record) if a.details.get("lost")]
    assert all(a.node == "c" and a.outcome == "interrupted" for a in lost_runs)
    recorders = {e.details["incarnation"] for e in record.events if e.kind == "start" and e.node != "c"}
    assert all(a.details["recorded_by"] in recorders for a in lost_runs)  # by the takers
    assert [e.reason for e in record.events if e.kind == "stop"] == ["done", "done"]


def test_a_holder_paused_past_its_expiry_gives_up_what_was_taken_over_and_nothing_completes_twice(
    s3_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    ids = [f"e{i:02d}" for i in range(60)]
    command = episode_command(seconds=1.0, max_seconds=1.5)
    paths = _nodes(s3_target, tmp_path, ids, command=command, concurrency=3)
    procs = {n: start_agent(paths[n], tmp_path / n) for n in ("a", "b", "c")}
    agents.extend(procs.values())
    store = Store(s3_target.url, s3_target.options)

    def results_of(node: str) -> int:
        return sum(1 for _, d in documents(store, "runs/once/results/") if d["node"] == node)

    assert wait_for(lambda: results_of("c") >= 3, 90)
    signal_tagged(procs["c"].tag, signal.SIGSTOP)  # the whole node stops: agent, server, episodes

    def ended_leases() -> list[dict[str, Any]]:
        return [d for _, d in documents(store, LAYOUT.prefix + "leases/") if d.get("end") == "expired"]

    # another node ends its lease after the expiry, and takes its episodes over; only then it resumes
    assert wait_for(lambda: any(d["holder"].startswith("c.") for d in ended_leases()), 90)
    assert wait_for(
        lambda: any(
            d["op"] == "takeover" and (d["from"] or "").startswith("c.")
            for _, d in documents(store, LAYOUT.chunks_prefix())
        ),
        90,
    )
    signal_tagged(procs["c"].tag, signal.SIGCONT)
    for node, proc in procs.items():
        assert proc.wait(180) == 0, (node, proc.stderr())
    record = read_record(store, RUN)
    _check_once(record, ids)
    first = next(d["holder"] for _, d in documents(store, LAYOUT.prefix + "holders/") if d["node"] == "c")
    [end] = [d for d in ended_leases() if d["holder"] == first]
    assert end["by"] != first
    # it learned it was fenced and rejoined under a new holder (as any other holder the load delayed)
    assert {d["holder"] for d in ended_leases()} <= _fenced_alive(store)
    assert "was ended by" in procs["c"].stderr()
    # what it had in flight when the lease ended is recorded once, by the taker, as interrupted
    incarnation = first.split(".", 1)[1]
    mine = [a for a in all_attempts(record) if a.details.get("incarnation") == incarnation]
    given_up = [a for a in mine if a.details.get("lost")]
    assert given_up
    assert all(a.outcome == "interrupted" and a.details["recorded_by"] != incarnation for a in given_up)
    assert [e.reason for e in record.events if e.kind == "stop"] == ["done"] * 3
