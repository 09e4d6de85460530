"""Spool-first uploads: store outages, restarts with a spool left behind, create-only races."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.config import STORE_DEFAULTS
from spoteval.agent.uploader import ATTEMPT, EVENT, GIVE_UP, HOLD, WRITE, Item, Uploader
from spoteval.record import Attempt, Event, RunLayout, format_time, parse_time, utc_now
from spoteval.store import Store
from tests import servers
from tests.conftest import StoreTarget
from tests.fake_metadata import Proxy, wait_for
from tests.servers import free_port

LAYOUT = RunLayout("r1")


def _attempt(episode: str, n: int = 1, outcome: str = "completed", **details: Any) -> dict[str, Any]:
    now = utc_now()
    return Attempt(
        episode_id=episode,
        outcome=outcome,
        attempt=n,
        node="n1",
        started=now - timedelta(seconds=1),
        ended=now,
        output={"answer": episode} if outcome == "completed" else None,
        details={"incarnation": "i1", "dispatch": n, **details},
    ).to_json()


def _event(seq: int = 0) -> Item:
    now = utc_now()
    ev = Event(time=now, run_id="r1", node="n1", kind="heartbeat", details={"seq": seq})
    return Item(EVENT, ev.to_json(), key_time=format_time(now), node="n1", seq=seq)


@pytest.fixture
def proxied(moto_server: servers.Server) -> Iterator[tuple[Proxy, str, dict[str, Any], dict[str, Any]]]:
    """A bucket reachable through a proxy that can be cut; also the direct options to check it."""
    bucket = f"t{os.urandom(6).hex()}"
    servers.create_s3_bucket(moto_server, bucket)
    proxy = Proxy(moto_server.port)
    direct = servers.s3_store_options(moto_server)
    through = {**STORE_DEFAULTS, **direct, "endpoint": proxy.url, "max_retries": 0, "retry_timeout": 1}
    yield proxy, f"s3://{bucket}/evals", through, direct
    proxy.close()


def test_results_finished_during_an_outage_reach_the_store_when_it_answers(
    proxied: tuple[Proxy, str, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    proxy, url, through, direct = proxied
    uploader = Uploader(Store(url, through), LAYOUT, str(tmp_path / "spool"), workers=4)
    check = Store(url, direct)
    proxy.cut()
    items = [uploader.submit(Item(ATTEMPT, _attempt(f"e{i}"), write_result=True)) for i in range(20)]
    assert len(os.listdir(tmp_path / "spool")) == 20  # on local disk before any upload
    assert wait_for(lambda: uploader.store_down, 5)
    assert check.list(LAYOUT.results_prefix) == []
    assert not uploader.flush(timeout=0.5)
    proxy.restore()
    assert uploader.flush(timeout=30)
    assert all(i.done.is_set() and i.outcome == "created" for i in items)
    assert len(check.list(LAYOUT.results_prefix)) == 20
    assert len(check.list(LAYOUT.attempts_prefix)) == 20
    assert os.listdir(tmp_path / "spool") == []
    assert uploader.failures > 0


def test_a_spool_left_by_a_dead_agent_is_uploaded_by_the_next(s3_target: StoreTarget, tmp_path: Path) -> None:
    dead_store = Store(
        s3_target.url,
        {
            **s3_target.options,
            "endpoint": f"http://127.0.0.1:{free_port()}",
            "max_retries": 0,
            "retry_timeout": 1,
        },
    )
    first = Uploader(dead_store, LAYOUT, str(tmp_path / "spool"), workers=1)
    first.submit(Item(ATTEMPT, _attempt("e1"), write_result=True))
    first.submit(_event())
    first.close()
    second = Uploader(Store(s3_target.url, s3_target.options), LAYOUT, str(tmp_path / "spool"), workers=2)
    loaded = second.load_spool()
    assert sorted(i.kind for i in loaded) == [ATTEMPT, EVENT]
    assert second.flush(timeout=30)
    store = Store(s3_target.url, s3_target.options)
    result = store.get(LAYOUT.result("e1"))
    assert result is not None and json.loads(result)["output"] == {"answer": "e1"}
    assert len(store.list(LAYOUT.events_prefix)) == 1


def test_an_attempt_number_taken_by_another_writer_moves_to_the_next_free_one(
    any_target: StoreTarget, tmp_path: Path
) -> None:
    store = Store(any_target.url, any_target.options)
    store.put_new(
        LAYOUT.attempt("e1", 1), json.dumps(_attempt("e1", 1, "interrupted", incarnation="x")).encode()
    )
    uploader = Uploader(store, LAYOUT, str(tmp_path / "spool"), workers=1)
    item = uploader.submit(Item(ATTEMPT, _attempt("e1", 1), write_result=True))
    assert uploader.flush(timeout=30)
    assert item.attempt_number == 2
    assert store.list(LAYOUT.attempts_of("e1")) == [LAYOUT.attempt("e1", 1), LAYOUT.attempt("e1", 2)]
    result = store.get(LAYOUT.result("e1"))
    assert result is not None and json.loads(result)["attempt"] == 2


def test_uploading_the_same_attempt_twice_records_it_once(any_target: StoreTarget, tmp_path: Path) -> None:
    store = Store(any_target.url, any_target.options)
    payload = _attempt("e1", 1)
    store.put_new(LAYOUT.attempt("e1", 1), json.dumps(payload, sort_keys=True).encode())
    uploader = Uploader(store, LAYOUT, str(tmp_path / "spool"), workers=1)
    item = uploader.submit(Item(ATTEMPT, payload))
    assert uploader.flush(timeout=30)
    assert item.outcome == "existed" and item.attempt_number == 1
    assert store.list(LAYOUT.attempts_of("e1")) == [LAYOUT.attempt("e1", 1)]


def test_losing_the_result_race_keeps_the_first_result_and_records_the_attempt(
    any_target: StoreTarget, tmp_path: Path
) -> None:
    store = Store(any_target.url, any_target.options)
    first = json.dumps({**_attempt("e1", 1), "node": "other"}).encode()
    store.put_new(LAYOUT.result("e1"), first)
    logged: list[str] = []
    uploader = Uploader(store, LAYOUT, str(tmp_path / "spool"), workers=1, log=logged.append)
    item = uploader.submit(Item(ATTEMPT, _attempt("e1", 1), write_result=True))
    assert uploader.flush(timeout=30)
    assert item.outcome == "result_existed"
    assert store.get(LAYOUT.result("e1")) == first
    assert store.exists(LAYOUT.attempt("e1", 1))
    assert any("already exists" in m for m in logged)


def test_an_event_name_taken_by_other_content_takes_the_next_seq(
    any_target: StoreTarget, tmp_path: Path
) -> None:
    store = Store(any_target.url, any_target.options)
    item = _event(seq=7)
    key = LAYOUT.event(parse_time(item.key_time), item.node, item.seq)
    store.put_new(key, b'{"other": true}')
    uploader = Uploader(store, LAYOUT, str(tmp_path / "spool"), workers=1)
    uploader.submit(item)
    assert uploader.flush(timeout=30)
    keys = store.list(LAYOUT.events_prefix)
    assert len(keys) == 2 and keys[1].endswith("-000008.json")
    assert store.get(key) == b'{"other": true}'


class _Gate:
    """A pool's ruling on each attempt write, set by the test: WRITE, HOLD or GIVE_UP per episode."""

    def __init__(self) -> None:
        self.rulings: dict[str, str] = {}
        self.asked: list[tuple[str, bool]] = []  # (episode, attempt written already)
        self.written_ok: list[str] = []

    def verdict(self, item: Item) -> str:
        episode = str(item.payload["episode_id"])
        self.asked.append((episode, item.attempt_written))
        return self.rulings.get(episode, WRITE)

    def written(self, item: Item, ruled: float) -> None:
        self.written_ok.append(str(item.payload["episode_id"]))


def test_a_pool_nodes_attempt_is_written_held_or_given_up_as_its_lease_rules(tmp_path: Path) -> None:
    store = Store(f"file://{tmp_path}/store")
    gate = _Gate()
    given_up: list[Item] = []
    done: list[Item] = []
    spool = tmp_path / "spool"
    up = Uploader(store, LAYOUT, str(spool), gate=gate, on_given_up=given_up.append, on_done=done.append)
    try:
        gate.rulings = {"held": HOLD, "lost": GIVE_UP}
        items = {
            e: up.submit(Item(ATTEMPT, _attempt(e), write_result=True, holder="n1.i1")) for e in gate.rulings
        }
        plain = up.submit(Item(ATTEMPT, _attempt("lone"), write_result=True))  # no holder: never asked
        assert wait_for(lambda: items["lost"].done.is_set() and plain.done.is_set(), 30)
        assert items["lost"].outcome == "given_up" and given_up == [items["lost"]]
        assert store.get(LAYOUT.attempt("lost", 1)) is None and store.get(LAYOUT.result("lost")) is None
        assert store.get(LAYOUT.result("lone")) is not None
        held = items["held"]
        assert wait_for(lambda: len([a for a in gate.asked if a[0] == "held"]) >= 3, 30)  # asked again
        assert not held.done.is_set() and up.outstanding == 1 and store.get(LAYOUT.attempt("held", 1)) is None
        assert sorted(os.listdir(spool)) == [os.path.basename(held.spool_path)]  # still spooled
        gate.rulings["held"] = WRITE  # the lease was renewed
        assert up.flush(30)
        assert held.outcome == "created" and held.result_written
        assert store.get(LAYOUT.result("held")) is not None and gate.written_ok == ["held"]
        # written, then the lease ends before the result: the attempt stays, the result is the taker's
        gate.rulings = {}
        late = Item(ATTEMPT, _attempt("late"), write_result=True, holder="n1.i1")
        original = gate.verdict

        def after_the_attempt(item: Item) -> str:
            return GIVE_UP if item.attempt_written else original(item)

        gate.verdict = after_the_attempt  # type: ignore[method-assign]
        up.submit(late)
        assert up.flush(30)
        assert late.outcome == "result_given_up" and not late.result_written and late in done
        assert store.get(LAYOUT.attempt("late", 1)) is not None and store.get(LAYOUT.result("late")) is None
        assert os.listdir(spool) == []
    finally:
        up.close()
