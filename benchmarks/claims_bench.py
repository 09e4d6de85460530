"""Claims figures (prints them; no timed tests): what a node start reads in a long run, and how long a
lost node's episodes wait before another node takes them over.

    venv/bin/python -m benchmarks.claims_bench [--episodes 100000] [--hours 48] [--nodes 20]

1. A run record on the file store shaped like a long pool run: `--episodes` episodes in chunks of 64,
   90 % of them with a result, `--nodes` live holders (each renewing every 30 s for `--hours`) and ten
   times as many ended ones, a summary an hour old. A new node joins (`Pool.join`, the results listing
   included): objects read (GET + HEAD), listings, writes and seconds. The same with a tenth of the
   episodes shows what grows with the run's length (only the results listing does).
2. Two nodes on the file store, renew 1 s and expiry 5 s: one stops without a word; the time from its
   last renewal to the other's takeover entry (expected: expiry + up to a renewal + half a renewal).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from spoteval.claims import Counting, Entry, Lease, Plan, Pool, PoolLayout, Summary
from spoteval.claims.model import dumps, manifest_digest
from spoteval.record import RunLayout
from spoteval.store import Store

RUN = "long"
BATCH = 64
T0 = "2026-11-29T00:00:00.000000Z"


def _write(root: Path, key: str, data: bytes) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def build(root: Path, episodes: int, hours: float, nodes: int) -> list[str]:
    """Write the record's objects directly (the same documents the protocol writes)."""
    eps = [f"ep{i:06d}" for i in range(episodes)]
    layout, results = PoolLayout(RUN), RunLayout(RUN)
    plan = Plan(episodes, BATCH, 30.0, 120.0, manifest_digest(eps), T0, "n0.a")
    _write(root, layout.plan, dumps({**plan.to_json(), "nonce": "x"}))
    renewals = int(hours * 3600 / 30)
    live = [f"live{i}.inc" for i in range(nodes)]
    ended = [f"old{i}.inc" for i in range(10 * nodes)]
    summary = Summary(n=1, holders=len(ended) + len(live), first=T0)
    for i, holder in enumerate(ended + live):
        _write(root, layout.holder(i), dumps({"holder": holder, "node": holder.split(".")[0], "time": T0}))
    live_k = max(1, renewals // 10)  # live holders joined in the last tenth of the run
    per_ended = max(1, (renewals - live_k) * nodes // len(ended))
    for holder in ended:
        for k in range(per_ended):
            state = {"totals": {"billed_s": 30.0 * k}}
            _write(root, layout.lease(holder, k), dumps(Lease(holder, k, holder, T0, state).to_json()))
        end = Lease(holder, per_ended, holder, T0, {"totals": {"billed_s": 30.0 * per_ended}}, end="expired")
        _write(root, layout.lease(holder, per_ended), dumps(end.to_json()))
        summary.fold(end, 0)
    for holder in live:
        for k in range(live_k):
            _write(root, layout.lease(holder, k), dumps(Lease(holder, k, holder, T0).to_json()))
        summary.live[holder] = max(0, live_k - 120)  # the summary is an hour old
    done_chunks = int(0.9 * episodes) // BATCH
    for c in range(done_chunks + len(live)):
        size = len(plan.span(c))
        owner = ended[c % len(ended)] if c < done_chunks else live[c - done_chunks]
        entries = [Entry("claim", owner, ranges=((0, size),), nonce=uuid.uuid4().hex)]
        if c < done_chunks:
            entries.append(Entry("done", owner, ranges=((0, size),)))
        for m, entry in enumerate(entries):
            _write(root, layout.chunk(c, m), dumps(entry.to_json()))
        finished = plan.span(c) if c < done_chunks else plan.span(c)[: size // 2]
        for i in finished:
            _write(root, results.result(eps[i]), b'{"outcome":"completed"}')
    summary.frontier = done_chunks + len(live) - 10  # claimed since the summary: ten chunks
    _write(root, layout.summary(0), dumps({**summary.to_json(), "n": 0}))
    return eps


def start(root: Path, eps: list[str]) -> tuple[dict[str, int], float]:
    store = Counting(Store(f"file://{root}"))
    t = time.perf_counter()
    layout = RunLayout(RUN)
    results = [e for e in (layout.episode_of_result(k) for k in store.list(layout.results_prefix)) if e]
    pool = Pool(store, RUN, eps, "newcomer", uuid.uuid4().hex[:8], batch=BATCH)
    pool.join(results)
    seconds = time.perf_counter() - t
    return dict(store.counts), seconds


def takeover(renew_s: float, expiry_s: float) -> float:
    root = Path(tempfile.mkdtemp(prefix="claims-bench-"))
    try:
        store = Store(f"file://{root}")
        eps = [f"e{i}" for i in range(64)]
        lost = Pool(store, "t", eps, "lost", "a", batch=16, renew_s=renew_s, expiry_s=expiry_s)
        other = Pool(store, "t", eps, "other", "b", batch=16, renew_s=renew_s, expiry_s=expiry_s)
        lost.join([])
        lost.take(16)
        other.join([])
        while other.take(16):
            pass
        for e in eps[16:]:
            other.finished(e)
        lost_at = time.monotonic()
        while True:  # `lost` makes no more calls; time since its last renewal (join)
            other.tick()
            if other.take(16):
                return time.monotonic() - lost_at + (lost_at - lost.renewed)
            time.sleep(0.05)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claims_bench")
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--nodes", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"node start, file store, {args.nodes} live nodes, {args.hours:g} h of 30 s renewals:")
    figures = []
    for episodes in (args.episodes // 5, args.episodes):
        root = Path(tempfile.mkdtemp(prefix="claims-bench-"))
        try:
            t = time.perf_counter()
            eps = build(root, episodes, args.hours, args.nodes)
            objects = sum(len(files) for _, _, files in os.walk(root))
            built = time.perf_counter() - t
            counts, seconds = start(root, eps)
            read = counts.get("get", 0) + counts.get("head", 0)
            figures.append((read, seconds))
            print(
                f"  {episodes:>7} episodes, {objects} objects in the record (built in {built:.0f} s): "
                f"{read} objects read ({counts.get('get', 0)} GET, {counts.get('head', 0)} HEAD), "
                f"{counts.get('list', 0)} listing(s), {counts.get('put', 0)} writes, {seconds:.2f} s"
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    renew_s, expiry_s = 1.0, 5.0
    took = [takeover(renew_s, expiry_s) for _ in range(3)]
    print(
        f"lost node -> its episodes taken over (renew {renew_s:g} s, expiry {expiry_s:g} s): "
        + ", ".join(f"{t:.2f} s" for t in took)
        + "; with the defaults (renew 10 s, expiry 45 s) expect 45-60 s"
    )
    ok = figures[-1][1] < 10.0 and figures[0][0] == figures[-1][0]
    print("targets: start under 10 s on the file store, objects read independent of the run's length:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
