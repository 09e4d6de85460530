"""Wall time of the placement CLI with its default simulation, as a user runs it.

    python -m benchmarks.placement_cli [--repeat N] [-- extra CLI arguments]

Runs `python -m scripts.placement` (the built-in example workload, 2000 simulated runs) as a fresh
process from the repository root, N times after one warm-up run, and prints the median, minimum and
maximum wall time, and the time of the simulation alone measured in this process. Target: a median
of at most 2 s. A timing, not a test: it prints figures and fails only when the CLI fails.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 2.0


def time_cli(extra: Sequence[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.placement", *extra],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 3):
        raise SystemExit(f"the CLI failed with exit code {proc.returncode}: {proc.stderr.strip()}")
    return elapsed


def time_simulation(repeat: int) -> list[float]:
    from spoteval.placement import EXAMPLE_WORKLOAD, parse_workload
    from spoteval.placement.simulate import simulate

    workload = parse_workload(EXAMPLE_WORKLOAD)
    simulate(workload)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        simulate(workload)
        times.append(time.perf_counter() - start)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=7, help="timed runs (default: %(default)s)")
    parser.add_argument("extra", nargs="*", help="extra arguments for the CLI (after --)")
    args = parser.parse_args(argv)

    time_cli(args.extra)  # warm-up: file system caches, compiled bytecode
    times = [time_cli(args.extra) for _ in range(args.repeat)]
    median = statistics.median(times)
    sim = time_simulation(args.repeat)
    cpus = platform.processor() or platform.machine()
    print(f"placement CLI ({' '.join(['python -m scripts.placement', *args.extra])}), {args.repeat} runs")
    print(f"  wall time   median {median:.3f} s   min {min(times):.3f} s   max {max(times):.3f} s")
    print(f"  target      <= {TARGET_SECONDS:.1f} s: {'met' if median <= TARGET_SECONDS else 'NOT met'}")
    print(
        f"  simulation alone (built-in example, 2000 runs, 5 strategies): "
        f"median {statistics.median(sim) * 1000:.1f} ms   min {min(sim) * 1000:.1f} ms   "
        f"max {max(sim) * 1000:.1f} ms"
    )
    print(f"  machine     {cpus}, Python {platform.python_version()}")
    return 0 if median <= TARGET_SECONDS else 1  # a missed target fails the run


if __name__ == "__main__":
    raise SystemExit(main())
