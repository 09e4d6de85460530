"""The node agent's speed and memory against moto S3 on loopback, with trivial episodes.

    python -m benchmarks.agent_bench [--episodes 2000] [--concurrency 64] [--in-flight 256]

Two runs of `python -m spoteval.agent` (provider local, the stand-in model server):

1. Throughput: `--episodes` trivial episodes (`sh -c 'echo {...} > {output}'`) at `--concurrency`.
   Prints episodes per second (first dispatch to stop event), the agent's CPU milliseconds per
   episode (its own user+system time, children excluded, over the whole run), completion-to-durable
   latency p50/p99 (episode exit -> attempt and result both in the store), and peak RSS.
2. Notice: `--in-flight` episodes that sleep; once all run, SIGTERM to the agent. Prints notice ->
   notice event in the store, and notice -> every in-flight attempt in the store as `interrupted`
   (both seen by polling the store from this process, so they include up to one listing's delay).

Targets: durable p99 <= 1 s, notice event <= 1 s, all in-flight recorded <= 3 s, RSS <= 150 MB.
A measurement, not a test: it prints every figure, then one line per target missed; it exits 1 when
a target is missed, a figure could not be measured, or a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spoteval.agent.__main__ import main as agent_main
from spoteval.record import Event
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import agent_config, cleanup_tagged, start_agent, write_config, write_manifest

#: figure -> its ceiling (seconds or MB); each is checked on every figure of that name measured
TARGETS: dict[str, float] = {
    "durable_p99_s": 1.0,
    "notice_event_durable_s": 1.0,
    "all_in_flight_recorded_s": 3.0,
    "peak_rss_mb": 150.0,
}
TRIVIAL = ["sh", "-c", 'echo \'{"ok": true, "id": "{episode_id}"}\' > {output}']
SLEEPY = ["sh", "-c", "sleep 120; echo '{}' > {output}"]


def _events(store: Store, run_id: str) -> list[Event]:
    out = []
    for key in store.list(f"runs/{run_id}/events/"):
        data = store.get(key)
        if data is not None:
            out.append(Event.loads(data)[0])
    return sorted(out, key=lambda e: e.time)


def _setup(moto: servers.Server, work: Path, run_id: str, n: int, **kw: Any) -> tuple[str, Store]:
    bucket = f"bench{os.urandom(4).hex()}"
    servers.create_s3_bucket(moto, bucket)
    options = servers.s3_store_options(moto)
    url = f"s3://{bucket}/evals"
    config = agent_config(url, options, run_id, work, price={"per_hour": 1.0}, heartbeat_s=5.0, **kw)
    path = write_config(work / f"{run_id}.json", config)
    manifest = write_manifest(work / f"{run_id}.jsonl", [f"e{i:05d}" for i in range(n)])
    if agent_main(["manifest", "--config", path, manifest]) != 0:
        raise SystemExit("manifest upload failed")
    return path, Store(url, options)


def throughput(moto: servers.Server, work: Path, episodes: int, concurrency: int) -> dict[str, Any]:
    path, store = _setup(moto, work, "tput", episodes, command=TRIVIAL, concurrency=concurrency)
    agent = start_agent(path, work)
    try:
        code = agent.wait(timeout=600)
    finally:
        cleanup_tagged(agent)
    if code != 0:
        raise SystemExit(f"throughput run failed ({code}): {agent.stderr()[-2000:]}")
    events = _events(store, "tput")
    ready = next(e for e in events if e.kind == "ready")
    stop = events[-1]
    again = start_agent(path, work)  # a restart on the finished run: how long reading the record takes
    try:
        if again.wait(timeout=300) != 0:
            raise SystemExit(f"restart failed: {again.stderr()[-2000:]}")
    finally:
        cleanup_tagged(again)
    restart = next(e for e in reversed(_events(store, "tput")) if e.kind == "start")
    seconds = (stop.time - ready.time).total_seconds() + float(
        ready.details["server_healthy_to_first_dispatch_s"]
    )
    durable = stop.details["result_durable_s"]
    return {
        "episodes": episodes,
        "concurrency": concurrency,
        "episodes_per_s": episodes / seconds,
        "agent_cpu_ms_per_episode": 1000 * float(stop.details["agent_cpu_s"]) / episodes,
        "durable_p50_s": durable["p50"],
        "durable_p99_s": durable["p99"],
        "durable_max_s": durable["max"],
        "peak_rss_mb": stop.details["agent_max_rss_mb"],
        "events": len(events),
        "restart_record_read_s": restart.details["record_read_s"],
    }


def notice(moto: servers.Server, work: Path, in_flight: int) -> dict[str, Any]:
    path, store = _setup(
        moto, work, "notice", in_flight, command=SLEEPY, concurrency=in_flight, sigterm_grace_s=10
    )
    agent = start_agent(path, work)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until a heartbeat lists every attempt in flight
            beats = [e for e in _events(store, "notice") if e.kind == "heartbeat"]
            if beats and len(beats[-1].details.get("in_flight", [])) == in_flight:
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"not all {in_flight} attempts started: {agent.stderr()[-2000:]}")
        time.sleep(1.0)  # the last spawns settle
        _kinds(store, "runs/notice/events/")  # read the events so far, so polling reads only new ones
        t0 = time.monotonic()
        agent.signal_group(signal.SIGTERM)
        t_event = t_all = None
        while t_event is None and time.monotonic() - t0 < 30:
            if "notice" in _kinds(store, "runs/notice/events/"):
                t_event = time.monotonic() - t0
            time.sleep(0.01)
        while t_all is None and time.monotonic() - t0 < 30:
            if len(store.list("runs/notice/attempts/")) >= in_flight:
                t_all = time.monotonic() - t0
            time.sleep(0.02)  # polling moto harder would slow the agent's own uploads
        code = agent.wait(timeout=30)
    finally:
        cleanup_tagged(agent)
    if code != 0:
        raise SystemExit(f"notice run failed ({code}): {agent.stderr()[-2000:]}")
    outcomes = set()
    for key in store.list("runs/notice/attempts/"):
        data = store.get(key)
        outcomes.add(json.loads(data or b"{}").get("outcome"))
    log = agent.stderr()
    match = re.search(r"summary (\{.*\})", log)
    summary = json.loads(match.group(1)) if match else {}
    event_s = re.search(r"notice event durable after ([0-9.]+) s", log)
    recorded_s = re.search(r"all recorded ([0-9.]+) s after the notice", log)
    return {
        "in_flight": in_flight,
        "notice_event_durable_s": t_event,
        "all_in_flight_recorded_s": t_all,
        "outcomes": sorted(str(o) for o in outcomes),
        "peak_rss_mb": summary.get("agent_max_rss_mb"),
        "agent_notice_event_s": float(event_s.group(1)) if event_s else None,
        "agent_all_recorded_s": float(recorded_s.group(1)) if recorded_s else None,
    }


_SEEN: dict[str, str] = {}


def _kinds(store: Store, prefix: str) -> set[str]:
    """Kinds of the events under `prefix`, reading each object once."""
    for key in store.list(prefix):
        if key not in _SEEN:
            data = store.get(key)
            _SEEN[key] = str(json.loads(data or b"{}").get("kind", ""))
    return set(_SEEN.values())


def missed_targets(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per target a run missed, or whose figure is missing (an unmeasured figure is a miss)."""
    out: list[str] = []
    for run in runs:
        for key, ceiling in TARGETS.items():
            if key not in run:
                continue
            value = run[key]
            if not isinstance(value, int | float):
                out.append(f"target missed: {key} was not measured (target <= {ceiling:g})")
            elif value > ceiling:
                out.append(f"target missed: {key} = {value:.3f} > {ceiling:g}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_bench")
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--in-flight", type=int, default=256)
    args = parser.parse_args(argv)
    moto = servers.start_moto()
    work = Path(tempfile.mkdtemp(prefix="agent-bench-"))
    try:
        t = throughput(moto, work, args.episodes, args.concurrency)
        n = notice(moto, work, args.in_flight)
    finally:
        moto.stop()
    ms = {k: (v * 1000 if isinstance(v, float) else v) for k, v in t.items()}
    lines = [
        f"agent benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, moto S3 on loopback",
        f"throughput: {t['episodes']} trivial episodes at concurrency {t['concurrency']}: "
        f"{t['episodes_per_s']:.0f} episodes/s, agent CPU {t['agent_cpu_ms_per_episode']:.2f} ms/episode",
        f"restart on the finished run: record read in {t['restart_record_read_s']:.2f} s "
        f"({t['events']} events, {t['episodes']} results)",
        f"completion -> durable: p50 {ms['durable_p50_s']:.0f} ms, p99 {ms['durable_p99_s']:.0f} ms, "
        f"max {ms['durable_max_s']:.0f} ms (target p99 <= 1000 ms)",
        f"notice with {n['in_flight']} in flight (SIGTERM):",
        f"  notice event durable: {n['notice_event_durable_s']:.3f} s seen from outside, "
        f"{n['agent_notice_event_s']} s by the agent (target <= 1 s)",
        f"  all in-flight recorded {n['outcomes']}: {n['all_in_flight_recorded_s']:.3f} s seen from outside, "
        f"{n['agent_all_recorded_s']} s by the agent (target <= 3 s)",
        f"peak RSS: {t['peak_rss_mb']} MB (throughput run), {n['peak_rss_mb']} MB (notice run) "
        "(target <= 150 MB)",
    ]
    missed = missed_targets([t, n])
    print("\n".join(lines + missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
