"""The operator lease (spoteval/operate/lease.py): one holder at a time, renewal, expiry, release, the
finished mark, and races decided by create-only writes. Clocks are injected: nothing here waits, and
no assertion depends on how fast the machine is."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from spoteval.operate.lease import (
    FINISHED,
    FREE,
    HELD,
    OTHER,
    LeaseObject,
    OperatorLease,
    judge,
    lease_prefix,
    read_objects,
)
from spoteval.store import Store, StoreError
from tests import servers
from tests.conftest import StoreTarget
from tests.faults import start_atomic_moto

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
TTL = 120.0


@dataclass
class Clocks:
    """One run's clocks: its wall clock (stamps, others' age) and its monotonic clock (renewals)."""

    wall_s: float = 0.0
    mono_s: float = 1000.0
    log: list[str] = field(default_factory=list)

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.wall_s)

    def mono(self) -> float:
        return self.mono_s

    def advance(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds


def lease(store: Any, holder: str, clocks: Clocks, ttl: float = TTL) -> OperatorLease:
    return OperatorLease(
        store, "r1", holder=holder, ttl_s=ttl, wall=clocks.wall, mono=clocks.mono, keeper=False
    )


@pytest.fixture
def store(tmp_path: Any) -> Store:
    return Store(f"file://{tmp_path}/store")


def objects(store: Store) -> list[dict[str, Any]]:
    return read_objects(store, "r1")


def test_the_first_run_takes_the_lease_and_a_second_only_reads(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks(mono_s=5.0)
    a, b = lease(store, "op-a", a_clock), lease(store, "op-b", b_clock)
    assert a.take().kind == HELD
    found = b.take()
    assert (found.kind, found.latest.holder if found.latest else None) == (OTHER, "op-a")
    assert "operator op-a holds the lease" in found.line() and found.line().endswith("this one only reads")
    assert a.held and not b.held
    assert [(o["k"], o["holder"], o["end"], o["took_over"]) for o in objects(store)] == [
        (0, "op-a", None, None)
    ]
    assert store.list(lease_prefix("r1")) == ["runs/r1/operator-lease/00000000.json"]


def test_the_holder_renews_every_quarter_ttl_and_a_reader_never_takes_a_renewed_lease(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    a, b = lease(store, "op-a", a_clock), lease(store, "op-b", b_clock)
    a.take()
    for _ in range(8):  # two ttls in quarter steps: every step renews, so the lease never gets old
        a_clock.advance(TTL / 4)
        b_clock.advance(TTL / 4)
        a.tick()
        assert a.held
        assert b.take().kind == OTHER
    assert [o["k"] for o in objects(store)] == list(range(9))
    assert {o["holder"] for o in objects(store)} == {"op-a"}


def test_a_silent_holder_expires_after_its_ttl_and_the_next_run_takes_it_over(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    a, b = lease(store, "op-a", a_clock), lease(store, "op-b", b_clock)
    a.take()
    b_clock.advance(TTL - 0.001)
    assert b.take().kind == OTHER  # just under the ttl by the reader's wall clock
    b_clock.advance(0.001)
    taken = b.take()
    assert taken.kind == HELD and b.held
    assert taken.took_over is not None
    assert (taken.took_over["holder"], taken.took_over["k"], taken.took_over["reason"]) == (
        "op-a",
        0,
        "expired",
    )
    assert "took the operator lease from op-a (expired: silent 120 s" in taken.line()
    # the silent holder comes back: its renewal finds object 1 taken, and it stops acting
    a_clock.advance(TTL / 4)
    a.tick()
    assert not a.held and not a.confirm()
    lost = a.lost
    assert lost is not None and lost.latest is not None and lost.latest.holder == "op-b"
    assert [(o["k"], o["holder"]) for o in objects(store)] == [(0, "op-a"), (1, "op-b")]


def test_a_holder_stops_acting_half_a_ttl_after_its_last_renewal_began(store: Store) -> None:
    clocks = Clocks()
    a = lease(store, "op-a", clocks)
    a.take()
    clocks.advance(TTL / 2 - 0.001)
    assert (a.held, a.confirm()) == (True, True)
    clocks.advance(0.001)
    assert (a.held, a.confirm()) == (False, False)  # (a renewal was due long ago: `tick` was never called)


class Passthrough:
    """A store that passes every request on (subclasses change one of them)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, key: str) -> bytes | None:
        return self.store.get(key)

    def exists(self, key: str) -> bool:
        return self.store.exists(key)

    def list(self, prefix: str) -> list[str]:
        return self.store.list(prefix)

    def put_new(self, key: str, data: bytes) -> bool:
        return self.store.put_new(key, data)


class Unwritable(Passthrough):
    """A store that answers reads and refuses writes (a holder cut off from the store)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.refuse = False

    def put_new(self, key: str, data: bytes) -> bool:
        if self.refuse:
            raise StoreError(f"put {key}: connection refused")
        return self.store.put_new(key, data)


def test_a_holder_whose_renewals_fail_stops_acting_before_anyone_may_take_over(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    cut = Unwritable(store)
    a, b = lease(cut, "op-a", a_clock), lease(store, "op-b", b_clock)
    a.take()
    cut.refuse = True
    for _ in range(2):
        a_clock.advance(TTL / 4)
        b_clock.advance(TTL / 4)
        a.tick()  # fails: the problem is kept, the lease is not renewed
    assert len(a.problems) == 2 and all("connection refused" in p for p in a.problems)
    assert not a.held  # ttl / 2 since its last renewal began
    assert b.take().kind == OTHER  # and nobody may take it for another ttl / 2
    b_clock.advance(TTL / 2)
    assert b.take().kind == HELD


def test_a_released_lease_is_taken_at_once_by_the_next_run(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    a, b = lease(store, "op-a", a_clock), lease(store, "op-b", b_clock)
    a.take()
    a.release()
    assert not a.held
    peeked = b.peek()
    released = "2026-12-01T08:00:00.000000Z"
    assert (peeked.kind, peeked.summary()) == (
        FREE,
        f"no operator holds the lease (op-a released it at {released})",
    )
    taken = b.take()
    assert (taken.kind, taken.took_over) == (HELD, None)
    assert [(o["k"], o["holder"], o["end"]) for o in objects(store)] == [
        (0, "op-a", None),
        (1, "op-a", "released"),
        (2, "op-b", None),
    ]


def test_a_finished_run_makes_every_later_run_exit_and_nothing_is_written(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    a, b = lease(store, "op-a", a_clock), lease(store, "op-b", b_clock)
    a.take()
    a.release(finished=True)
    keys = store.list(lease_prefix("r1"))
    b_clock.advance(10 * TTL)
    assert b.take().kind == FINISHED
    assert b.peek().kind == FINISHED
    assert "is finished" in b.take().line() and b.take().line().endswith("nothing to operate")
    assert store.list(lease_prefix("r1")) == keys


class Interleave(Passthrough):
    """A store that runs `before` once, just before the first create-only write of `key`."""

    def __init__(self, store: Store, key: str, before: Callable[[], None]) -> None:
        super().__init__(store)
        self.key, self.before = key, before
        self.fired = False

    def put_new(self, key: str, data: bytes) -> bool:
        if key == self.key and not self.fired:
            self.fired = True
            self.before()
        return self.store.put_new(key, data)


def test_a_late_renewal_that_wins_the_race_keeps_the_lease_with_its_holder(store: Store) -> None:
    a_clock, b_clock = Clocks(), Clocks()
    a = lease(store, "op-a", a_clock)
    a.take()
    b_clock.advance(TTL)  # by the reader's clock object 0 is old enough to take over ...
    a_clock.advance(TTL / 4)
    racing = Interleave(store, "runs/r1/operator-lease/00000001.json", a.tick)  # ... but A renews first
    found = lease(racing, "op-b", b_clock).take()
    assert racing.fired
    assert (found.kind, found.latest.holder if found.latest else None) == (OTHER, "op-a")
    assert a.held
    assert [(o["k"], o["holder"], o["took_over"]) for o in objects(store)] == [
        (0, "op-a", None),
        (1, "op-a", None),
    ]


def test_an_unreadable_lease_object_is_taken_over_and_said(store: Store) -> None:
    store.put_new("runs/r1/operator-lease/00000000.json", b"not json")
    clocks = Clocks()
    b = lease(store, "op-b", clocks)
    assert b.peek().kind == FREE and "not JSON" in (b.peek().problem or "")
    taken = b.take()
    assert taken.kind == HELD and taken.took_over is not None
    assert (taken.took_over["reason"], taken.took_over["k"]) == ("unreadable", 0)


def test_judge_is_a_pure_rule_of_the_latest_object_and_the_readers_clock() -> None:
    def obj(end: str | None = None) -> LeaseObject:
        return LeaseObject("r1", 3, "op-a", "2026-12-01T08:00:00Z", TTL, TTL / 4, end=end)

    assert judge(None, T0) == FREE
    assert judge(obj(), T0 + timedelta(seconds=TTL - 1)) == OTHER
    assert judge(obj(), T0 + timedelta(seconds=TTL)) == FREE
    assert judge(obj(), T0 - timedelta(hours=1)) == OTHER  # a holder whose clock runs ahead of ours
    assert judge(obj("released"), T0) == FREE
    assert judge(obj("finished"), T0 + timedelta(days=30)) == FINISHED
    assert judge(obj(), T0, unreadable=True) == FREE


def test_lease_objects_round_trip_and_bad_ones_are_refused() -> None:
    good = LeaseObject("r1", 2, "op-a", "2026-12-01T08:00:00Z", TTL, 30.0, "host", 7, "released", None, "n")
    assert LeaseObject.from_json(json.loads(json.dumps(good.to_json()))) == good
    for bad in ({"holder": "", "k": 0}, {"holder": "a", "k": -1}, {"holder": "a", "k": 0, "ttl_s": 0}):
        with pytest.raises(ValueError):
            LeaseObject.from_json({"time": "2026-12-01T08:00:00Z", "ttl_s": TTL, **bad})
    with pytest.raises(ValueError):
        LeaseObject.from_json(
            {"holder": "a", "k": 0, "ttl_s": TTL, "time": "2026-12-01T08:00:00Z", "end": "x"}
        )
    with pytest.raises(ValueError):
        OperatorLease(Store("memory:///"), "r1", ttl_s=1.0)


# --- races against the real servers -----------------------------------------------------------------


@pytest.fixture(scope="module")
def atomic_moto() -> Iterator[servers.Server]:
    server = start_atomic_moto()
    yield server
    server.stop()


@pytest.fixture(params=["s3", "az"])
def race_target(request: pytest.FixtureRequest) -> StoreTarget:
    """A fresh bucket on moto with create-only PUTs made atomic, as S3's are, or a container on Azurite."""
    if request.param == "az":
        target: StoreTarget = request.getfixturevalue("azure_target")
        return target
    server = request.getfixturevalue("atomic_moto")
    bucket = f"lease-{os.urandom(6).hex()}"
    servers.create_s3_bucket(server, bucket)
    return StoreTarget("s3", f"s3://{bucket}/evals", servers.s3_store_options(server))


def _race(leases: list[OperatorLease]) -> dict[str, str]:
    """Every lease takes at once (a barrier); what each found, by holder."""
    gate = threading.Barrier(len(leases))
    found: dict[str, str] = {}

    def take(one: OperatorLease) -> None:
        gate.wait()
        found[one.holder] = one.take().kind

    threads = [threading.Thread(target=take, args=(one,)) for one in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found


def test_of_many_runs_taking_the_lease_at_once_exactly_one_holds_it(race_target: StoreTarget) -> None:
    rounds, runs = 3, 6
    for r in range(rounds):
        leases = [
            lease(Store(race_target.url, race_target.options), f"op-{r}-{i}", Clocks()) for i in range(runs)
        ]
        found = _race(leases)
        holders = [h for h, kind in found.items() if kind == HELD]
        assert len(holders) == 1 and list(found.values()).count(OTHER) == runs - 1
        [winner] = [x for x in leases if x.holder == holders[0]]
        winner.release()
    store = Store(race_target.url, race_target.options)
    kept = [(o["k"], o["end"]) for o in objects(store)]
    assert kept == [(k, None if k % 2 == 0 else "released") for k in range(2 * rounds)]
