"""The drill as a pool (`--nodes 3`): three agents of one run on the local plane share its episodes
through claims while the chaos controller takes nodes away and the operator brings each back.

One drill runs for the module (about 20 s on 2 cores, minutes on a loaded machine). The nodes are
killed outright (SIGKILL of everything they started) and restarted under the same node id, whose new
incarnation takes its lost holder's episodes back and ends its lease at once. Completed attempts
beyond one per episode are exactly 0 whatever the load: a node lost between its attempt write and
its result write leaves the finished attempt, whose result its restart or its taker writes; a live
node whose lease another node ended (renewals later than the expiry on a loaded machine) gives up
what was taken over (README, Pools: "What runs twice, and what never does").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import drill as drill_cli
from spoteval import drill, report
from spoteval.claims import PoolLayout
from spoteval.record import Attempt
from spoteval.store import Store

# also run beside two busy processes (.ci/loaded-pass); the module's drill runs in its first test
pytestmark = [pytest.mark.timing, pytest.mark.timeout(900)]

SETTINGS = drill.DrillConfig(
    out=Path("unused"),
    episodes=96,
    concurrency=4,
    lifetime_s=5.0,
    notice_s=1.0,
    capacity_delay_s=0.5,
    seed=7,
    episode_seconds=(0.3, 1.2),
    fail_rate=0.05,
    max_attempts=2,
    heartbeat_s=2.0,
    server_startup_s=0.2,
    timeout_s=600.0,  # stops a drill that hangs; how long one takes depends on the machine's load
    nodes=3,
)
NODES = ("drill-node-1", "drill-node-2", "drill-node-3")


@dataclass(frozen=True)
class Drilled:
    result: drill.DrillResult
    report: report.RunReport
    attempts: tuple[Attempt, ...]
    results: dict[str, Attempt]
    manifest: list[str]


@pytest.fixture(scope="module")
def drilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drilled]:
    out = tmp_path_factory.mktemp("drill-pool")
    result = drill.run_drill(drill.DrillConfig(**{**SETTINGS.__dict__, "out": out}))
    record = report.load_run(Store(result.store_url, result.store_options), result.run_id)
    rep = report.analyse(record)
    yield Drilled(result, rep, record.attempts, dict(record.results), [e.id for e in record.manifest or ()])


def test_every_episode_has_exactly_one_result_and_none_completes_twice(drilled: Drilled) -> None:
    r = drilled.result
    assert r.finished, r.notes
    assert sorted(drilled.results) == sorted(drilled.manifest) and len(drilled.manifest) == 96
    completed = Counter(a.episode_id for a in drilled.attempts if a.outcome == "completed")
    assert sum(n - 1 for n in completed.values()) == 0  # completed attempts beyond one per episode
    assert drilled.report.pool is not None
    assert drilled.report.pool.beyond_one == 0


def test_every_node_served_and_each_was_taken_and_brought_back_as_the_record_says(drilled: Drilled) -> None:
    r = drilled.result
    assert len(r.kills) > 0, "the seeded lifetimes take nodes before the end"  # the scenario's premise
    events = drilled.report.record.events
    node_starts = 0
    for node in NODES:
        mine = [e for e in events if e.node == node]
        agent_starts = [e for e in mine if e.kind == "start" and "incarnation" in e.details]
        by_operator = [e for e in mine if e.kind == "start" and e.details.get("source") == "operator"]
        assert sum(1 for e in mine if e.kind == "preempted") == sum(1 for k in r.kills if k.node == node)
        assert agent_starts[0].reason == "initial"
        assert {e.reason for e in agent_starts[1:]} <= {"restart_after_preemption"}
        assert all(e.details["pool"] == drill.DRILL_POOL for e in agent_starts)
        node_starts += 1 + len(by_operator)  # the stack's first start, then only the operator's
    assert node_starts == r.incarnations
    assert {a.node for a in drilled.results.values()} == set(NODES)


def _fenced(drilled: Drilled) -> set[str]:
    """Incarnations whose lease another node ended while they still ran (on a loaded machine a live
    node's renewals can come later than the expiry): each rejoined as `{node}.{incarnation}-2`."""
    store = Store(drilled.result.store_url, drilled.result.store_options)
    holders = [
        json.loads(store.get(key) or b"{}")["holder"]
        for key in store.list(PoolLayout(drilled.result.run_id).prefix + "holders/")
    ]
    return {h.split(".", 1)[1].rsplit("-", 1)[0] for h in holders if h.rsplit("-", 1)[-1].isdigit()}


def test_interrupted_attempts_are_those_of_a_node_while_it_was_being_taken(drilled: Drilled) -> None:
    kills = drilled.result.kills
    fenced = _fenced(drilled)
    interrupted = [a for a in drilled.attempts if a.outcome == "interrupted"]
    assert len(interrupted) > 0
    for a in interrupted:
        # taken with its node, or given up by a live holder whose lease was ended (recorded by its taker)
        taken = any(k.node == a.node and k.launched <= a.started <= k.killed_at for k in kills)
        given_up = a.details.get("lost") is True and a.details["incarnation"] in fenced
        assert taken or given_up, a
        assert drilled.results[a.episode_id].outcome != "interrupted"
    for k in kills:  # each episode in flight at a notice has its attempt (ended by it, or finished in time)
        at = k.notice_at or k.killed_at
        for e in k.in_flight:
            assert any(
                a.node == k.node and a.episode_id == e and k.launched <= a.started <= at
                for a in drilled.attempts
            ), (k, e)


def test_nodes_below_one_are_refused_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert drill_cli.main(["--nodes", "0"]) == 2
    assert capsys.readouterr().err == "drill: --nodes must be >= 1, got 0\n"
