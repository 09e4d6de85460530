"""A pool of agents against one agent on the same run, on moto S3 on loopback (prints figures).

    python -m benchmarks.pool_bench [--episodes 400] [--nodes 4] [--seconds 2] [--concurrency 8]

Three runs of the same manifest of short episodes (`sh -c 'sleep S; echo ... > {output}'`): one
agent; `--nodes` agents started together with the config's `pool` section; and `--nodes` agents of
which one is lost for good (SIGKILL of every process it started) once a quarter of the episodes
have their result. For the first two: wall time from the first `ready` event to the last result in
the store, and episodes per second over it; the pool's throughput ratio (target >= 3.6 for 4 nodes).
For the pools: the duplicated work, episode time spent on attempts whose episode another node
finished, as a share of all episode time, with the attempts in flight on the lost node (which no
design can save: they run again) shown apart; and completed attempts beyond one per episode.
Targets: duplicated work beyond the lost node's in-flight attempts <= 1 %, and 0 completed attempts
beyond one per episode. Exits non-zero when a run fails or a target is missed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spoteval.agent.__main__ import main as agent_main
from spoteval.record import Attempt, Event, RunLayout
from spoteval.report.pool import pool_figures
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import (
    AgentProcess,
    agent_config,
    cleanup_tagged,
    signal_tagged,
    start_agent,
    write_config,
    write_manifest,
)

POOL = {"batch": 8, "renew_s": 2.0, "expiry_s": 20.0}


def _read(store: Store, run_id: str) -> tuple[list[Event], list[Attempt], dict[str, Attempt]]:
    layout = RunLayout(run_id)
    events = [Event.loads(store.get(k) or b"")[0] for k in store.list(layout.events_prefix)]
    attempts = [Attempt.loads(store.get(k) or b"")[0] for k in store.list(layout.attempts_prefix)]
    results: dict[str, Attempt] = {}
    for key in store.list(layout.results_prefix):
        result = Attempt.loads(store.get(key) or b"", as_result=True)[0]
        results[result.episode_id] = result
    return sorted(events, key=lambda e: e.time), attempts, results


def run(
    moto: servers.Server, work: Path, nodes: int, args: argparse.Namespace, *, lose: bool = False
) -> dict[str, Any]:
    """One run; with `lose`, the last node is lost for good once a quarter of the results are in."""
    bucket = f"pool{os.urandom(4).hex()}"
    servers.create_s3_bucket(moto, bucket)
    run_id = f"run{nodes}{'-loss' if lose else ''}"
    options, url = servers.s3_store_options(moto), f"s3://{bucket}/evals"
    command = ["sh", "-c", f"sleep {args.seconds}; echo '{{\"ok\": true}}' > {{output}}"]
    ids = [f"e{i:05d}" for i in range(args.episodes)]
    manifest = write_manifest(work / f"{run_id}.jsonl", ids)
    agents = []
    procs: list[AgentProcess] = []
    try:
        for n in range(nodes):
            state = work / f"{run_id}-n{n}"
            state.mkdir()
            extra: dict[str, Any] = {"pool": POOL} if nodes > 1 else {}
            config = agent_config(
                url,
                options,
                run_id,
                state,
                node=f"n{n}",
                command=command,
                concurrency=args.concurrency,
                **extra,
            )
            path = write_config(state / "agent.json", config)
            if n == 0 and agent_main(["manifest", "--config", path, manifest]) != 0:
                raise SystemExit("manifest upload failed")
            agents.append((path, state))
        procs.extend(start_agent(path, state) for path, state in agents)
        if lose:
            store, prefix = Store(url, options), RunLayout(run_id).results_prefix
            while len(store.list(prefix)) < args.episodes // 4:
                time.sleep(0.05)
            signal_tagged(procs[-1].tag, signal.SIGKILL)  # lost without a word, never restarted
        for proc in procs[:-1] if lose else procs:
            if proc.wait(timeout=900) != 0:
                raise SystemExit(f"an agent failed: {proc.stderr()[-2000:]}")
    finally:
        for proc in procs:
            cleanup_tagged(proc)
    events, attempts, results = _read(Store(url, options), run_id)
    if sorted(results) != ids:
        raise SystemExit(f"{len(results)} results for {len(ids)} episodes")
    first_ready = min(e.time for e in events if e.kind == "ready")
    last = max(r.ended for r in results.values())
    wall = (last - first_ready).total_seconds()
    figures = pool_figures(attempts, results)
    return {
        "wall_s": wall,
        "per_s": len(ids) / wall,
        "duplicated": figures.duplicated_share,
        "duplicated_s": figures.duplicated_s,
        "lost_s": figures.interrupted_s,
        "episode_s": figures.episode_s,
        "twice": figures.beyond_interrupted_share,
        "beyond_one": figures.beyond_one,
        "by_node": {node: share.results for node, share in sorted(figures.nodes.items())},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool_bench")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    moto = servers.start_moto()
    try:
        with tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
            one = run(moto, Path(tmp), 1, args)
            pool = run(moto, Path(tmp), args.nodes, args)
            loss = run(moto, Path(tmp), args.nodes, args, lose=True)
    finally:
        moto.stop()
    ratio = pool["per_s"] / one["per_s"]
    print(
        f"{args.episodes} episodes of {args.seconds:g} s, concurrency {args.concurrency} per node, moto S3:\n"
        f"  1 node: {one['wall_s']:.1f} s, {one['per_s']:.2f} episodes/s\n"
        f"  {args.nodes} nodes: {pool['wall_s']:.1f} s, {pool['per_s']:.2f} episodes/s, results per node "
        f"{pool['by_node']}\n"
        f"  throughput ratio {ratio:.2f} (target >= {0.9 * args.nodes:.1f}); duplicated work "
        f"{100 * pool['duplicated']:.2f} % of episode time (target <= 1 %); completed attempts beyond one "
        f"per episode: {pool['beyond_one']}\n"
        f"  {args.nodes} nodes, one lost for good at a quarter of the results: {loss['wall_s']:.1f} s, "
        f"results per node {loss['by_node']}\n"
        f"    duplicated work {loss['duplicated_s']:.1f} s of {loss['episode_s']:.1f} s episode time: in "
        f"flight on the lost node {loss['lost_s']:.1f} s ({100 * loss['lost_s'] / loss['episode_s']:.2f} %, "
        f"run again: no design saves it), beyond that {100 * loss['twice']:.2f} % (target <= 1 %); "
        f"completed attempts beyond one per episode: {loss['beyond_one']} (target 0)\n"
        f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (every node shares this machine)"
    )
    met = ratio >= 0.9 * args.nodes and pool["duplicated"] <= 0.01 and pool["beyond_one"] == 0
    return 0 if met and loss["twice"] <= 0.01 and loss["beyond_one"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
