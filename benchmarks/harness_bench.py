"""Start-up per shard and model time per sample of each harness, and the episode size they give.

    python -m benchmarks.harness_bench [--samples 10] [--sample-s 1.4] [--write]

For inspect-ai and lm-eval in turn: the shipped ten-question task (spoteval/harness/tasks/), run
through the shard runner (`python -m spoteval.harness run`, a fresh process from an unpacked agent
bundle, as on a node) against the stand-in model server on loopback, with a folder store: once as a
one-sample shard and once as one shard of `--samples` samples. Prints, per harness:

- start-up per shard: the process's wall time minus the model time of its samples (interpreter,
  imports, task and dataset load, client set-up, log writing), median of the two runs;
- model time per sample: the samples' own model time over the `--samples` shard (against the
  stand-in: the harness's own per-sample work plus one loopback round trip);
- the episode size spot-eval chooses for 1000 samples from those two figures, and for a model that
  takes `--sample-s` per sample (the drill's 1.4 s).

`--write` stores the two figures of each harness, with the harness's version, the date and the
machine's load, in spoteval/harness/measured.json: what shard plans are chosen from by default.

A measurement, not a test: it prints figures and exits non-zero only when a run fails.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spoteval import standin
from spoteval.bundle.build import build_bundle
from spoteval.bundle.unpack import unpack
from spoteval.harness.shards import HarnessBlock, choose_episode_size, episode_command
from spoteval.harness.timing import MEASURED_FILE, Timing

#: the shipped tasks as they are named inside the bundle's spoteval/ package
TASKS = {
    "inspect": HarnessBlock("inspect", "spoteval/harness/tasks/inspect_tiny.py@spoteval_tiny", "standin"),
    "lm-eval": HarnessBlock("lm-eval", "spoteval/harness/tasks/lm_eval@spoteval_tiny", "standin"),
}
VERSIONS = {"inspect": "inspect_ai", "lm-eval": "lm_eval"}
INSPECT_IDS = ["arith/1", "colour 1", "geo/1", "bio/1", "astro/1", "phys/1", "words/1", "colour 2", "arith/2"]


def _samples(harness: str, n: int) -> list[Any]:
    ids: list[Any] = [*INSPECT_IDS, "words 2"] if harness == "inspect" else list(range(10))
    return ids[:n]


def _run(
    block: HarnessBlock, url: str, work: Path, episode: str, samples: list[Any], *, root: Path
) -> tuple[float, dict[str, Any]]:
    out = work / f"{episode}.json"
    values = {"{model_url}": url, "{output}": str(out), "{episode_id}": episode}
    argv = [values.get(a, a) for a in episode_command(block, sys.executable)]
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "SPOTEVAL_STORE": f"file://{work}/store",
        "SPOTEVAL_RUN_ID": "bench",
        "SPOTEVAL_WORK_DIR": str(work / "node"),
        "SPOTEVAL_EPISODE_PARAMS": json.dumps({"samples": samples}),
    }
    t0 = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=root, capture_output=True, check=False)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(f"{block.harness} shard {episode} exited {done.returncode}: {' '.join(tail)}")
    result: dict[str, Any] = json.loads(out.read_text())
    return wall, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.harness_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--samples", type=int, default=10, help="samples in the larger shard (at most 10)")
    parser.add_argument("--sample-s", type=float, default=1.4, help="a real model's time per sample")
    parser.add_argument("--write", action="store_true", help=f"store the figures in {MEASURED_FILE.name}")
    args = parser.parse_args(argv)
    measured: dict[str, Any] = {}
    n = max(2, min(10, args.samples))
    server = standin.serve("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"harness  start-up/shard  model s/sample  size (stand-in)  size (model at {args.sample_s:.1f} s)")
    try:
        for harness, block in TASKS.items():
            with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
                work = Path(tmp)
                archive = work / "agent-bundle.zip"
                archive.write_bytes(build_bundle().data)
                root = unpack(archive, work / "bundle")
                startups: list[float] = []
                per_sample = 0.0
                for episode, samples in (("one", _samples(harness, 1)), ("many", _samples(harness, n))):
                    wall, result = _run(block, server.base_url, work, episode, samples, root=root)
                    startups.append(wall - float(result["model_s"]))
                    if episode == "many":
                        per_sample = float(result["model_s"]) / max(1, int(result["ran"]))
                startup = statistics.median(startups)
                size_here = choose_episode_size(Timing(startup, max(per_sample, 1e-3)), 1000)
                size_real = choose_episode_size(Timing(startup, args.sample_s), 1000)
                print(
                    f"{harness:<8} {startup:>12.2f} s {per_sample:>12.3f} s {size_here:>16d} {size_real:>21d}"
                )
                measured[harness] = {
                    "startup_s": round(startup, 2),
                    "sample_s": round(max(per_sample, 1e-3), 4),
                    "version": f"{VERSIONS[harness]} {importlib.metadata.version(VERSIONS[harness])}",
                    "measured": f"{time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f}",
                }
    except RuntimeError as exc:
        print(f"harness_bench: {exc}", file=sys.stderr)
        return 1
    finally:
        server.shutdown()
        server.server_close()
    if args.write:
        MEASURED_FILE.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
        print(f"wrote {MEASURED_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
