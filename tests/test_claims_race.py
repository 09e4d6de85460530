"""Claim races with concurrent writers, threads and processes, on file://, moto S3 and Azurite."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from spoteval.claims import Pool, PoolLayout
from spoteval.record import RunLayout
from spoteval.store import Store, StoreError
from tests.conftest import StoreTarget

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

RUN = "race"
EPISODES = [f"e{i:03d}" for i in range(120)]
BATCH = 8


def work(url: str, options: dict[str, Any], node: str, start_at: float) -> list[str]:
    """One node: take, 'run' (write the result), repeat until nothing is left anywhere."""
    store = Store(url, options)
    pool = Pool(store, RUN, EPISODES, node, "i1", batch=BATCH, renew_s=0.5, expiry_s=30.0)
    pool.join([])
    while time.time() < start_at:  # every worker reaches this point first, then they race
        time.sleep(0.001)
    layout = RunLayout(RUN)
    taken: list[str] = []
    while True:
        try:  # a store error is retried, as the agent does: every step is one create-only write
            got = pool.take(3)
            taken.extend(got)
            for episode in got:
                store.put_new(layout.result(episode), json.dumps({"node": node}).encode())
                pool.finished(episode)
            if not got:
                pool.tick()
                if pool.exhausted() and not pool.waiting_on():
                    break
                time.sleep(0.01)
        except StoreError:
            time.sleep(0.1)
    pool.release()
    return taken


def check(target: StoreTarget, taken: list[list[str]]) -> None:
    flat = [e for t in taken for e in t]
    assert sorted(flat) == EPISODES  # every episode taken, by exactly one node
    store = Store(target.url, target.options)
    layout = PoolLayout(RUN)
    keys = store.list(layout.chunks_prefix())
    assert sum(k.endswith("/000000.json") for k in keys) == 15  # one claim per chunk of 8
    assert len(store.list(RunLayout(RUN).results_prefix)) == 120


def test_four_threads_race_for_claims(any_target: StoreTarget) -> None:
    start_at = time.time() + 1.0
    out: dict[str, list[str]] = {}

    def run(node: str) -> None:
        out[node] = work(any_target.url, any_target.options, node, start_at)

    threads = [threading.Thread(target=run, args=(f"n{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(out) == ["n0", "n1", "n2", "n3"]
    check(any_target, list(out.values()))


@pytest.mark.slow
def test_three_processes_race_for_claims(any_target: StoreTarget) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=3, mp_context=context) as pool:
        start_at = time.time() + 8.0  # time for the spawned interpreters to import
        futures = [pool.submit(work, any_target.url, any_target.options, f"p{i}", start_at) for i in range(3)]
        taken = [f.result(timeout=180) for f in futures]
    check(any_target, taken)


def test_many_writers_of_one_claim_have_one_winner(any_target: StoreTarget) -> None:
    store = Store(any_target.url, any_target.options)
    key = PoolLayout(RUN).chunk(0, 0)
    barrier = threading.Barrier(8)
    wins: list[bool] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        mine = Store(any_target.url, any_target.options)
        barrier.wait()
        created = mine.put_new(key, json.dumps({"op": "claim", "holder": f"h{i}"}).encode())
        with lock:
            wins.append(created)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(wins) == [False] * 7 + [True]
    assert store.get(key) is not None
