"""The real model server's restart on this machine: vLLM 0.32 on the CPU serving the tiny model.

    python -m benchmarks.vllm_bench [--skip-starts] [--skip-agent] [--out DIR]      (make bench-vllm)

1. Starts, phase by phase (the phases the agent reads from vLLM's log, spoteval/agent/server_phases.py):
   the first start on an empty cache; the second on the same cache (kept: vLLM's compile and
   model-inspection cache, the Hugging Face cache); a third on an empty cache again (not kept).
   Prints each start's phases and time to healthy, and the ratios second/first and third/first.
2. The notice with the real server, by the node agent (`python -m spoteval.agent`, provider local,
   file store): 4 sample episodes in flight (each 60 s); SIGTERM to the agent; the time from the
   signal to every in-flight attempt in the store as `interrupted` (polled from here). Twice: with
   the agent alone signalled (a provider's notice), and with the server's process group signalled
   at the same moment (an OS shutdown: the engine dies at once and its requests would wait for the
   client's timeout).
3. What is left once the agent has ended, after each notice run and after a run whose API server
   is SIGKILLed mid-run (its engine and worker live on as orphans unless the agent ends the group):
   the node's processes (found by the run's folder in their environment) and the shared memory
   segments that appeared and no live process holds.

Targets: second start <= 0.6 x the first's time to healthy; notice -> all recorded < 3 s; 0
processes and 0 bytes of shared memory left. Prints every figure, one line per target missed, and
exits 1 when a target is missed or a figure could not be measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spoteval.agent.config import ServerConfig, build_agent_config
from spoteval.agent.episodes import ModelServer
from spoteval.agent.procgroup import marked, members, orphaned_shm, shm_now
from spoteval.agent.server_phases import PHASE_NAMES, ServerLog, phases
from spoteval.drill.config import DrillConfig, sample_eval_command
from spoteval.loopback import free_port
from spoteval.manifest import ManifestEntry, dump_manifest
from spoteval.record import Attempt
from spoteval.store import Store
from spoteval.vllm import find_env, server_command

READY_TIMEOUT_S = 900.0
IN_FLIGHT = 4


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- 1. starts ------------------------------------------------------------------------------------


def one_start(command: Sequence[str], log_path: Path, port: int) -> dict[str, Any]:
    """Start the server, wait until healthy, read its phases, stop it (its whole group)."""
    config = ServerConfig(
        url=f"http://127.0.0.1:{port}", command=tuple(command), ready_timeout_s=READY_TIMEOUT_S
    )
    server = ModelServer(config, str(log_path), os.environ)
    follower = ServerLog(str(log_path), _log)
    follower.start()
    server.start()
    assert server.started_mono is not None
    healthy: float | None = None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and server.exit_code() is None:
        if server.healthy(timeout=1.0):
            healthy = time.monotonic()
            break
        time.sleep(0.1)
    marks = follower.marks()
    follower.stop()
    stop_t = time.monotonic()
    end = server.stop(grace_s=10.0)
    return {
        "healthy_s": None if healthy is None else round(healthy - server.started_mono, 2),
        "phases": phases(marks, server.started_mono, healthy),
        "compile_cache": marks.facts.get("compile_cache"),
        "stop_s": round(time.monotonic() - stop_t, 2),
        "left_processes": 0 if end is None else end.left,
    }


def starts(out: Path) -> dict[str, Any]:
    env = find_env()
    model = env.model()
    kept, fresh = out / "cache-kept", out / "cache-fresh"
    results: dict[str, Any] = {}
    for name, cache in (
        ("first (empty cache)", kept),
        ("second (cache kept)", kept),
        ("third (empty cache)", fresh),
    ):
        port = free_port()
        command = [a.replace("{port}", str(port)) for a in server_command(env, model, cache)]
        _log(f"vllm_bench: {name} ...")
        results[name] = one_start(command, out / f"start-{len(results) + 1}.log", port)
        _log(f"vllm_bench: {name}: {json.dumps(results[name])}")
    return results


def print_starts(results: dict[str, Any]) -> list[str]:
    cols = [n for n in PHASE_NAMES if any(n in r["phases"] for r in results.values())]
    header = f"{'start':<22}" + "".join(f"{c:>17}" for c in cols) + f"{'to healthy':>12}  compile cache"
    print(header)
    for name, r in results.items():
        cells = "".join(f"{r['phases'].get(c, float('nan')):>16.1f}s" for c in cols)
        print(f"{name:<22}{cells}{(r['healthy_s'] or float('nan')):>11.1f}s  {r['compile_cache']}")
    first, second, third = (r["healthy_s"] for r in results.values())
    missed: list[str] = []
    if first and second and third:
        ratio = second / first
        print(
            f"second / first: {ratio:.2f} (target <= 0.6); "
            f"third (caches not kept) / first: {third / first:.2f}"
        )
        if ratio > 0.6:
            missed.append(f"second start {ratio:.2f} x the first (target <= 0.6)")
    else:
        missed.append("a start did not become healthy")
    return missed


# --- 2 and 3. the agent with the real server --------------------------------------------------------


def _attempts(store: Store, run_id: str) -> list[Attempt]:
    out = []
    for key in store.list(f"runs/{run_id}/attempts/"):
        data = store.get(key)
        if data is not None:
            out.append(Attempt.loads(data)[0])
    return out


def agent_run(out: Path, mode: str) -> dict[str, Any]:
    """mode: `notice` (SIGTERM to the agent), `shutdown` (to the server's group too), `server_kill`
    (SIGKILL of the API server alone while episodes run)."""
    env = find_env()
    folder = out / f"agent-{mode}"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    run_id = f"vllm-bench-{mode}"
    store_url = f"file://{folder / 'store'}"
    # the drill's sample episode: asks the server, then takes 60 s (in flight at the notice)
    episode = sample_eval_command(DrillConfig(out=folder, episode_seconds=(60.0, 60.0), fail_rate=0.0))
    config = build_agent_config(
        run_id=run_id,
        store=store_url,
        node_id="bench-node",
        provider="local",
        region="local",
        instance_type="cpu",
        server_url=f"http://127.0.0.1:{port}",
        server_command=[
            a.replace("{port}", str(port)) for a in server_command(env, env.model(), out / "cache-kept")
        ],
        ready_timeout_s=READY_TIMEOUT_S,
        episodes_command=episode,
        concurrency=IN_FLIGHT,
        max_attempts=2,
        timeout_s=600,
        heartbeat_s=1.0,
        sigterm_grace_s=10.0,
        spool_dir=str(folder / "spool"),
        work_dir=str(folder / "work"),
        boot_file=str(folder / "boot.json"),
    )
    config_path = folder / "agent.json"
    config_path.write_text(json.dumps(config))
    manifest = folder / "manifest.jsonl"
    manifest.write_bytes(dump_manifest([ManifestEntry(f"ep-{i}", {}) for i in range(IN_FLIGHT)]))
    agent_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    subprocess.run(
        [sys.executable, "-m", "spoteval.agent", "manifest", "--config", str(config_path), str(manifest)],
        check=True,
        env=agent_env,
        capture_output=True,
    )
    shm_before = shm_now()
    log = open(folder / "agent.log", "wb")  # noqa: SIM115 - the child holds it
    agent = subprocess.Popen(
        [sys.executable, "-m", "spoteval.agent", "--config", str(config_path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=agent_env,
        start_new_session=True,
    )
    log.close()
    store = Store(store_url)
    work = folder / "work" / run_id
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and agent.poll() is None:  # until every episode runs
        if len(list(work.glob("ep-*.log"))) >= IN_FLIGHT and b"ready:" in (folder / "agent.log").read_bytes():
            break
        time.sleep(0.2)
    time.sleep(1.0)  # in their request or their sleep
    server_pids = [p for p in marked(str(out / "cache-kept")) if p != agent.pid]
    figures: dict[str, Any] = {"mode": mode}
    t0 = time.monotonic()
    if mode == "server_kill":
        api = min(server_pids) if server_pids else None
        if api is not None:
            os.kill(api, signal.SIGKILL)
    else:
        if mode == "shutdown" and server_pids:
            pgid = os.getpgid(min(server_pids))
            os.killpg(pgid, signal.SIGTERM)
        os.kill(agent.pid, signal.SIGTERM)
        while time.monotonic() - t0 < 120:
            interrupted = [a for a in _attempts(store, run_id) if a.outcome == "interrupted"]
            if len(interrupted) >= IN_FLIGHT:
                figures["notice_to_all_interrupted_s"] = round(time.monotonic() - t0, 3)
                break
            time.sleep(0.05)
    try:
        figures["agent_exit"] = agent.wait(timeout=300)
    except subprocess.TimeoutExpired:
        agent.kill()
        figures["agent_exit"] = "killed after 300 s"
    figures["agent_end_s"] = round(time.monotonic() - t0, 2)
    time.sleep(1.0)
    figures["processes_left"] = len(marked(str(folder)))
    left = orphaned_shm(shm_before)
    figures["shm_segments_left"], figures["shm_bytes_left"] = len(left), sum(left.values())
    figures["shm_left"] = sorted(left)
    figures["server_group_left"] = sum(len(members(p)) for p in server_pids)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_bench")
    parser.add_argument("--out", help="folder for the logs (default: a temporary one)")
    parser.add_argument("--skip-starts", action="store_true")
    parser.add_argument("--skip-agent", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-bench-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(
        f"vLLM {find_env().root} on {platform.machine()}, {os.cpu_count()} cores, "
        f"load {load[0]:.1f}; logs in {out}"
    )
    missed: list[str] = []
    if not args.skip_starts:
        missed += print_starts(starts(out))
    if not args.skip_agent:
        if args.skip_starts:  # the agent runs start from a kept cache: warm it first
            env = find_env()
            port = free_port()
            one_start(
                [
                    a.replace("{port}", str(port))
                    for a in server_command(env, env.model(), out / "cache-kept")
                ],
                out / "warm.log",
                port,
            )
        for mode in ("notice", "shutdown", "server_kill"):
            _log(f"vllm_bench: agent run, {mode} ...")
            figures = agent_run(out, mode)
            print(json.dumps(figures, sort_keys=True))
            took = figures.get("notice_to_all_interrupted_s")
            if mode != "server_kill" and (took is None or took >= 3.0):
                missed.append(f"{mode}: notice -> all in-flight interrupted {took} s (target < 3 s)")
            if figures["processes_left"] or figures["shm_bytes_left"] or figures["server_group_left"]:
                missed.append(
                    f"{mode}: left {figures['processes_left']} process(es), {figures['shm_bytes_left']} bytes"
                )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    for line in missed:
        print(f"target missed: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
