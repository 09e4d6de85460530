"""The uploader under faults, against real servers on loopback (moto S3, Azurite): the order after an
outage, an item the store refuses, a panic inside obstore, a store that denies every request, and
two uploaders racing on the same episode at the same moment."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.config import STORE_DEFAULTS
from spoteval.agent.uploader import ATTEMPT, EVENT, Item, Uploader
from spoteval.record import Attempt, Event, RunLayout, format_time, utc_now
from spoteval.store import Store
from tests import servers
from tests.conftest import StoreTarget
from tests.fake_metadata import wait_for
from tests.faults import StoreFront, start_atomic_moto
from tests.faulty_agent import PanicException

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

LAYOUT = RunLayout("r1")


def _attempt(episode: str, n: int = 1, outcome: str = "completed", inc: str = "i1") -> dict[str, Any]:
    now = utc_now()
    return Attempt(
        episode_id=episode,
        outcome=outcome,
        attempt=n,
        node="n1",
        started=now - timedelta(seconds=1),
        ended=now,
        output={"answer": episode, "by": inc} if outcome == "completed" else None,
        details={"incarnation": inc, "dispatch": n},
    ).to_json()


def _event(kind: str, seq: int) -> Item:
    now = utc_now()
    ev = Event(time=now, run_id="r1", node="n1", kind=kind, reason="sigterm" if kind == "notice" else None)
    return Item(EVENT, ev.to_json(), key_time=format_time(now), node="n1", seq=seq)


@pytest.fixture
def front(moto_server: servers.Server) -> Iterator[tuple[StoreFront, str, dict[str, Any], dict[str, Any]]]:
    bucket = f"t{os.urandom(6).hex()}"
    servers.create_s3_bucket(moto_server, bucket)
    proxy = StoreFront(moto_server.port)
    direct = servers.s3_store_options(moto_server)
    through = {**STORE_DEFAULTS, **direct, "endpoint": proxy.url, "max_retries": 0, "retry_timeout": 1}
    yield proxy, f"s3://{bucket}/evals", through, direct
    proxy.close()


def test_after_an_outage_results_go_before_heartbeats(
    front: tuple[StoreFront, str, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    proxy, url, through, _ = front
    order: list[str] = []
    lock = threading.Lock()

    def done(item: Item) -> None:
        with lock:
            order.append("attempt" if item.kind == ATTEMPT else str(item.payload["kind"]))

    uploader = Uploader(Store(url, through), LAYOUT, str(tmp_path / "spool"), workers=1, on_done=done)
    proxy.set("cut")
    for i in range(6):
        uploader.submit(_event("heartbeat", i))
        uploader.submit(Item(ATTEMPT, _attempt(f"e{i}"), write_result=True))
    uploader.submit(_event("notice", 100))
    assert wait_for(lambda: uploader.store_down, 5)
    proxy.set("pass")
    assert uploader.flush(30)
    # the notice first (it decides what happens next), then every result, then the heartbeats
    assert order[0] == "notice"
    assert order[1:7] == ["attempt"] * 6
    assert len(order) == 8  # superseded heartbeats are not uploaded: the newest lists what the others did


def test_an_item_the_store_refuses_is_not_reported_recorded(
    front: tuple[StoreFront, str, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    _, url, through, _ = front
    seen: list[Item] = []
    spool = tmp_path / "spool"
    uploader = Uploader(Store(url, through), LAYOUT, str(spool), workers=2, on_done=seen.append)
    bad = uploader.submit(Item(ATTEMPT, _attempt("e1", outcome="interrupted"), write_result=True))
    good = uploader.submit(Item(ATTEMPT, _attempt("e2"), write_result=True))
    assert not uploader.flush(10)  # not everything is in the store
    assert (bad.outcome, good.outcome) == ("refused", "created")
    assert uploader.refused == 1
    assert os.listdir(spool) == [os.path.basename(bad.spool_path)]  # kept for a person to look at
    assert [i.outcome for i in seen] == ["created"]  # the agent hears only of what is recorded


class _PanickyStore(Store):
    """A store whose first `panics` create-only writes raise a BaseException (a Rust panic)."""

    def __init__(self, url: str, options: dict[str, Any], panics: int) -> None:
        super().__init__(url, options)
        self.panics = panics
        self.lock = threading.Lock()

    def put_new(self, key: str, data: bytes) -> bool:
        with self.lock:
            panic = self.panics > 0
            self.panics -= 1 if panic else 0
        if panic:
            raise PanicException("called `Result::unwrap()` on an `Err` value")
        return super().put_new(key, data)


def test_a_panic_inside_obstore_does_not_kill_an_upload_worker(
    front: tuple[StoreFront, str, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    _, url, through, direct = front
    logged: list[str] = []
    uploader = Uploader(
        _PanickyStore(url, through, panics=3), LAYOUT, str(tmp_path / "spool"), workers=2, log=logged.append
    )
    items = [uploader.submit(Item(ATTEMPT, _attempt(f"e{i}"), write_result=True)) for i in range(8)]
    assert uploader.flush(20)
    assert [i.outcome for i in items] == ["created"] * 8
    assert len(Store(url, direct).list(LAYOUT.results_prefix)) == 8
    assert len([m for m in logged if m.startswith("upload worker: PanicException")]) == 3


def test_a_store_that_denies_access_stops_the_uploads_with_the_reason(
    front: tuple[StoreFront, str, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    proxy, url, through, _ = front
    uploader = Uploader(Store(url, through), LAYOUT, str(tmp_path / "spool"), workers=4)
    proxy.set("deny")
    for i in range(5):
        uploader.submit(Item(ATTEMPT, _attempt(f"e{i}"), write_result=True))
    assert wait_for(lambda: uploader.fatal is not None, 10)
    assert "lacked the necessary privileges" in str(uploader.fatal)
    time.sleep(0.5)  # requests already on their way when the first 403 came back
    asked = proxy.answered["deny"]
    assert not uploader.flush(1.0)
    assert proxy.answered["deny"] == asked  # no more requests once the error is known to be permanent
    assert len(os.listdir(tmp_path / "spool")) == 5  # everything stays spooled


@pytest.fixture(scope="module")
def atomic_moto() -> Iterator[servers.Server]:
    server = start_atomic_moto()
    yield server
    server.stop()


@pytest.mark.parametrize("kind", ["s3", "az"])
def test_two_uploaders_racing_on_one_episode_record_one_result_and_both_attempts(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """On moto with its create-only PUT made atomic (tests/atomic_moto.py): moto's own check and
    write are not, so two PUTs of one new key can both succeed there, which S3 never allows."""
    if kind == "s3":
        moto: servers.Server = request.getfixturevalue("atomic_moto")
        bucket = f"t{os.urandom(6).hex()}"
        servers.create_s3_bucket(moto, bucket)
        target = StoreTarget("s3", f"s3://{bucket}/evals", servers.s3_store_options(moto))
    else:
        target = request.getfixturevalue("azure_target")
    rounds = 12
    uploaders = [
        Uploader(Store(target.url, target.options), LAYOUT, str(tmp_path / f"spool{k}"), workers=2)
        for k in range(2)
    ]
    barrier = threading.Barrier(2)
    items: dict[int, list[Item]] = {0: [], 1: []}

    def race(k: int) -> None:
        for r in range(rounds):
            item = Item(ATTEMPT, _attempt(f"e{r}", inc=f"inc{k}"), write_result=True)
            barrier.wait()
            items[k].append(uploaders[k].submit(item))
            item.done.wait(30)

    threads = [threading.Thread(target=race, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(u.flush(30) for u in uploaders)
    store = Store(target.url, target.options)
    assert len(store.list(LAYOUT.results_prefix)) == rounds
    for r in range(rounds):
        pair = [items[0][r], items[1][r]]
        assert sorted(i.attempt_number for i in pair) == [1, 2]
        assert sorted(i.outcome for i in pair) == ["created", "result_existed"]  # one result each round
        winner = next(i for i in pair if i.outcome == "created")
        stored = Attempt.loads(store.get(LAYOUT.result(f"e{r}")) or b"", as_result=True)[0]
        assert stored.output == winner.payload["output"]
