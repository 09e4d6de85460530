"""The claims protocol on one store, step by step, with a clock the test moves (no waiting)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from spoteval.claims import ChunkLog, Counting, Entry, Pool, PoolLayout, read_start
from spoteval.claims.io import first_missing
from spoteval.claims.model import dumps
from spoteval.claims.takeover import Settled, Takeover
from spoteval.record import RunLayout
from spoteval.store import Store

RUN = "r1"
LAYOUT = PoolLayout(RUN)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def episodes(n: int) -> list[str]:
    return [f"e{i:04d}" for i in range(n)]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"file://{tmp_path}/store")


def pool(store: Store, node: str, eps: list[str], clock: Clock, inc: str = "i1", **kw: float) -> Pool:
    params: dict[str, float] = {"batch": 10, "renew_s": 1.0, "expiry_s": 4.0, **kw}
    return Pool(
        Counting(store),
        RUN,
        eps,
        node,
        inc,
        batch=int(params["batch"]),
        renew_s=params["renew_s"],
        expiry_s=params["expiry_s"],
        clock=clock,
    )


def chunk_ops(store: Store) -> list[tuple[int, str, str]]:
    out = []
    for key in store.list(LAYOUT.chunks_prefix()):
        c = int(key.split("/")[-2])
        data = store.get(key)
        assert data is not None
        doc = json.loads(data)
        out.append((c, doc["op"], doc["holder"].split(".")[0]))
    return out


def finish(p: Pool, store: Store, eps: list[str]) -> None:
    """Record a result for each episode (as the agent's uploader would) and tell the pool."""
    for e in eps:
        store.put_new(RunLayout(RUN).result(e), b"{}")
        p.finished(e)


def drain(p: Pool, store: Store, n: int = 4) -> list[str]:
    out: list[str] = []
    while True:
        got = p.take(n)
        if not got:
            return out
        out.extend(got)
        finish(p, store, got)


# --- the log's rules, as pure functions -------------------------------------------------------


def test_chunk_log_replays_claim_start_steal_takeover_and_done() -> None:
    log = ChunkLog(0, 6)
    log.apply(Entry("claim", "A", ranges=((0, 2),)))
    assert log.owner == ["A"] * 6 and log.started == [True, True, False, False, False, False]
    log.apply(Entry("steal", "B", ranges=((1, 6),), source="A"))  # offset 1 is started: stays A's
    assert log.owner == ["A", "A", "B", "B", "B", "B"]
    log.apply(Entry("start", "A", ranges=((2, 4),)))  # A no longer owns 2, 3: nothing changes
    assert log.started == [True] * 6
    log.apply(Entry("claim", "C"))  # a claim after entry 0 is ignored and reported
    assert log.owner == ["A", "A", "B", "B", "B", "B"] and len(log.problems) == 1
    log.apply(Entry("done", "A", ranges=((0, 1),)))
    log.apply(Entry("takeover", "C", source="A"))  # only what A owns and is not complete
    assert log.owner == ["A", "C", "B", "B", "B", "B"] and log.started[1] is False
    assert log.holders() == {"B", "C"}
    log.apply(None, "bad entry")
    assert log.problems[-1] == "bad entry" and log.length == 7


def test_first_missing_finds_the_end_of_a_prefix_with_few_probes() -> None:
    probes: list[int] = []

    def exists(i: int) -> bool:
        probes.append(i)
        return i < 1000

    assert first_missing(exists) == 1000
    assert len(probes) == 20
    probes.clear()
    assert first_missing(exists, 990) == 1000
    assert len(probes) == 6


# --- one node ----------------------------------------------------------------------------------


def test_single_node_runs_the_manifest_in_order_one_claim_per_chunk(store: Store) -> None:
    clock = Clock()
    eps = episodes(50)
    p = pool(store, "solo", eps, clock)
    p.join([])
    assert drain(p, store, 4) == eps
    p.tick()
    ops = chunk_ops(store)
    assert [op for c, op, _ in ops if op == "claim"] == ["claim"] * 5
    # each chunk of 10: a claim starting 4, a start of 4, a start of 2, then done
    assert [op for c, op, _ in ops if c == 0] == ["claim", "start", "start", "done"]
    assert len(ops) == 20


def test_a_batch_the_size_of_a_chunk_costs_one_write(store: Store) -> None:
    clock = Clock()
    eps = episodes(100)
    p = pool(store, "solo", eps, clock)
    p.join([])
    counts = p.store.counts  # type: ignore[attr-defined]
    before = counts["put"]
    taken = []
    for _ in range(10):
        taken.extend(p.take(10))
    assert taken == eps
    assert counts["put"] - before == 10  # ten claims, each starting its whole chunk


def test_episodes_with_a_result_are_not_started(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    p = pool(store, "solo", eps, clock)
    p.join(eps[:15])
    assert drain(p, store) == eps[15:]


# --- expiry, takeover, fencing ----------------------------------------------------------------


def test_a_silent_holder_expires_after_the_expiry_and_its_episodes_are_taken_over(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    a = pool(store, "a", eps, clock)
    a.join([])
    running = a.take(3)  # A claims chunk 0, starts 3 of them, finishes 1, then goes silent
    finish(a, store, running[:1])
    b = pool(store, "b", eps, clock)
    b.join(eps[:1])
    # chunk 1; then A's 7 not started, stolen in halves (one steal each half renewal)
    assert drain(b, store, 10) == eps[10:] + eps[6:10]
    clock.t += 0.5
    assert b.take(10) == eps[4:6]
    clock.t += 0.5
    assert b.take(10) == eps[3:4]
    finish(b, store, eps[3:6])
    for _ in range(2):  # 3 s of B's clock since it saw A's lease: not yet expired (expiry 4 s)
        clock.t += 1.0
        b.tick()
        assert b.take(5) == []
    clock.t += 1.0
    b.tick()
    assert b.counts["expired"] == 1
    assert drain(b, store, 5) == eps[1:3]  # the two A started and left without a result
    end = store.get(LAYOUT.lease(a.holder, 1))
    assert end is not None and json.loads(end)["end"] == "expired"
    assert json.loads(end)["by"] == b.holder

    # A comes back: its renewal finds the tombstone; it gives up its claims and rejoins
    old = a.holder
    a.tick()
    assert a.holder != old and a.counts["fenced"] == 1
    assert a.take(5) == []
    assert any("was ended by" in p for p in a.problems)
    assert sorted(r.split("/")[-1] for r in store.list(RunLayout(RUN).results_prefix)) == [
        f"{e}.json" for e in eps
    ]


def test_a_live_holder_is_never_expired_whatever_its_wall_clock_says(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    import spoteval.claims.pool as pool_module
    from spoteval.record import utc_now

    clock = Clock()
    eps = episodes(20)
    a = pool(store, "a", eps, clock)
    monkeypatch.setattr(pool_module, "utc_now", lambda: utc_now() - timedelta(days=1))
    a.join([])  # A's wall clock is a day behind
    a.take(2)
    monkeypatch.undo()
    b = pool(store, "b", eps, clock)
    b.join([])
    drain(b, store)
    for _ in range(40):  # 20 expiries of B's clock; A renews every second of it
        clock.t += 0.5
        a.tick()
        b.tick()
    assert b.counts["expired"] == 0
    assert a.take(20) == eps[2:6]  # A started 3 and ran 2; B stole the later half of the rest
    assert b.counts["stolen"] == 4


def test_a_node_that_leaves_in_order_is_taken_over_at_once(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    a = pool(store, "a", eps, clock)
    a.join([])
    a.take(2)
    a.release({"totals": {"billed_s": 12.5}})
    b = pool(store, "b", eps, clock)
    view = b.join([])
    assert view.summary.totals == {"billed_s": 12.5}
    assert view.summary.last_by_node["a"]["end"] == "released"
    assert drain(b, store, 20) == eps  # no waiting: A's chunk is taken over, then chunk 1


def test_a_restarted_node_takes_its_earlier_holders_episodes_back_then_ends_its_lease(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    a1 = pool(store, "a", eps, clock, inc="first")
    a1.join([])
    a1.take(3)  # then SIGKILLed: no end written
    a2 = pool(store, "a", eps, clock, inc="second")
    a2.join([])
    end = json.loads(store.get(LAYOUT.lease(a1.holder, 1)) or b"{}")
    assert end["end"] == "replaced" and end["by"] == a2.holder
    # before the end: one takeover of chunk 0, what a1 had started still started (a2 runs it first)
    entry = json.loads(store.get(LAYOUT.chunk(0, 1)) or b"{}")
    assert (entry["op"], entry["from"], entry["ranges"]) == ("takeover", a1.holder, [[0, 3]])
    assert store.get(LAYOUT.lease(a1.holder, 1)) is not None
    assert drain(a2, store, 20) == eps
    assert (a2.counts["taken_over"], a2.counts["reclaimed"]) == (0, 10)
    assert [a2.standing(e, a1.holder) for e in eps[:3]] == ["own"] * 3  # its attempts are a2's now


def test_a_takeover_keeps_settled_episodes_started_whatever_the_taker_knew_of_their_results(
    store: Store,
) -> None:
    clock = Clock()
    eps = episodes(10)
    layout = RunLayout(RUN)
    c = pool(store, "c", eps, clock)
    c.join([])
    assert c.take(3) == eps[:3]
    for e in eps[:3]:  # c finished them (results in the store) and was lost before any `done` entry
        store.put_new(layout.result(e), b"{}")
    a = pool(store, "a", eps, clock)
    a.join([])
    clock.t += 5.0
    a.tick()
    assert a.take(10) == eps[3:]  # its check found the three results: settled, started, not run
    b = pool(store, "b", eps, clock)  # a is lost in turn; b knew of the three results when it joined
    b.join(eps[:3])
    clock.t += 5.0
    b.tick()
    assert b.take(10) == eps[3:]
    chunk = b.logs[0]
    assert chunk.owner == [b.holder] * 10
    # settled: started in the log, so a node that knows nothing of their results cannot steal them
    assert chunk.started == [True] * 10 and chunk.unstarted(b.holder) == []
    newcomer = pool(store, "n", eps, clock)
    newcomer.join([])
    assert newcomer.take(10) == [] and newcomer.counts["stolen"] == 0


def test_a_takeover_another_node_wrote_while_this_one_checked_writes_nothing_here(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    c = pool(store, "c", eps, clock)
    c.join([])
    c.take(3)  # then lost
    a, b = pool(store, "a", eps, clock), pool(store, "b", eps, clock)
    a.join([])
    b.join([])
    clock.t += 5.0
    a.tick()
    b.tick()
    committed: list[frozenset[str]] = []

    def check(takeover: Takeover) -> Settled:
        assert b.take(10) == eps[:10]  # b takes c's episodes over while a reads their record
        return Settled(commit=committed.append)

    a.check = check
    assert a.take(10) == eps[10:]  # nothing of c's is left for a: it claims the next chunk
    assert committed == []  # so it records nothing of c's episodes (b did)
    assert [op for ch, op, _ in chunk_ops(store) if ch == 0].count("takeover") == 1


# --- stealing at the end ----------------------------------------------------------------------


def test_an_idle_node_steals_the_later_half_of_what_a_slow_node_has_not_started(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    a = pool(store, "slow", eps, clock)
    a.join([])
    assert a.take(10) == eps[:10]
    assert a.take(1) == eps[10:11]  # claims chunk 1, starts 3 (a quarter of a chunk, rounded up)
    b = pool(store, "idle", eps, clock)
    b.join([])
    stolen = b.take(10)
    assert stolen == eps[16:20]  # 7 not started: the later 4 (one steal per half renewal)
    assert a.take(10) == eps[11:16]  # A keeps its started two and the first three
    clock.t += 0.5
    assert b.take(10) == []  # A started the rest: nothing more to steal
    ops = chunk_ops(store)
    assert [(op, who) for c, op, who in ops if c == 1] == [
        ("claim", "slow"),
        ("steal", "idle"),
        ("start", "slow"),
    ]


# --- bad objects ------------------------------------------------------------------------------


def test_an_unreadable_claim_is_reported_and_its_episodes_run_once(store: Store) -> None:
    clock = Clock()
    eps = episodes(30)
    store.put_new(LAYOUT.chunk(1, 0), b"{not json")
    a, b = pool(store, "a", eps, clock), pool(store, "b", eps, clock)
    a.join([])
    b.join([])
    seen: list[str] = []
    for _ in range(20):
        for p in (a, b):
            got = p.take(3)
            finish(p, store, got)
            seen.extend(got)
    assert sorted(seen) == eps
    assert any(LAYOUT.chunk(1, 0) in p and "not JSON" in p for p in a.problems + b.problems)


def test_an_unreadable_plan_turns_claims_off_and_loses_nothing(store: Store) -> None:
    clock = Clock()
    eps = episodes(12)
    store.put_new(LAYOUT.plan, b"[]")
    p = pool(store, "a", eps, clock)
    p.join(eps[:2])
    assert drain(p, store) == eps[2:]
    assert p.problems[0].startswith(f"{LAYOUT.plan}: not a JSON object")
    assert "claims are off" in p.problems[0]


def test_an_unreadable_lease_counts_as_a_renewal(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    a = pool(store, "a", eps, clock)
    a.join([])
    a.take(1)
    b = pool(store, "b", eps, clock)
    b.join([])
    drain(b, store)
    clock.t += 3.0
    b.tick()
    store.put_new(LAYOUT.lease(a.holder, 1), b"garbage")  # "A" renews, unreadably
    clock.t += 3.0
    b.tick()
    clock.t += 2.0
    b.tick()
    assert b.counts["expired"] == 0
    clock.t += 2.0
    b.tick()
    assert b.counts["expired"] == 1  # 4 s after the last (unreadable) renewal was seen
    assert any("leases" in p and "not JSON" in p for p in b.problems)


# --- starts read little -----------------------------------------------------------------------


def _history(store: Store, n: int) -> Callable[[], Pool]:
    """A run of n episodes: node a ran all but the last chunk and left; node b holds the last chunk."""
    clock = Clock()
    eps = episodes(n)
    a = pool(store, "a", eps, clock)
    a.join([])
    for _ in range((n - 10) // 10):
        finish(a, store, a.take(10))
    a.tick()
    a.release({"totals": {"billed_s": 100.0}})
    b = pool(store, "b", eps, clock)
    b.join(store_results(store))
    b.take(2)
    return lambda: pool(store, "c", eps, clock)


def store_results(store: Store) -> list[str]:
    layout = RunLayout(RUN)
    return [e for e in (layout.episode_of_result(k) for k in store.list(layout.results_prefix)) if e]


@pytest.mark.parametrize("n", [200, 2000])
def test_a_start_reads_the_same_objects_whatever_the_runs_length(tmp_path: Path, n: int) -> None:
    store = Store(f"file://{tmp_path}/{n}")
    newcomer = _history(store, n)()
    view = newcomer.join(store_results(store))
    counts = newcomer.store.counts  # type: ignore[attr-defined]
    assert (counts["get"], counts["head"], counts["put"], counts["list"]) == (7, 12, 4, 0)
    assert view.summary.totals == {"billed_s": 100.0}
    assert list(view.leases) == ["b.i1"]
    assert newcomer.frontier == n // 10


def test_read_start_folds_ended_holders_into_the_summary(store: Store) -> None:
    clock = Clock()
    eps = episodes(20)
    for node in ("a", "b"):
        p = pool(store, node, eps, clock)
        p.join([])
        p.release({"totals": {"billed_s": 10.0, "cost": 0.5}})
    view = read_start(store, LAYOUT)
    assert view.summary.ended == 2 and view.summary.totals == {"billed_s": 20.0, "cost": 1.0}
    assert sorted(view.summary.last_by_node) == ["a", "b"] and view.leases == {}
    assert json.loads(store.get(LAYOUT.summary(view.summary.n - 1)) or b"{}")["ended"] == 2
    assert dumps({"x": 1}) == b'{"x":1}'
