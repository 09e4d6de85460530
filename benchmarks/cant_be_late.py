"""The setting of "Can't Be Late" (Wu et al., NSDI 2024), Table 3 and Figure 11, on the tick engine.

    python -m benchmarks.cant_be_late [--runs 300] [--seed 0]

A 48 h job with a changeover d = 0.2 h, deadlines of 52 h and 60 h (job fractions 0.92 and 0.8),
300 start times per trace, the eight AWS V100/K80 availability traces of 2022-10-26
(tests/data/traces/availability/1-node/aws-10-26-2022: 1 and 8 GPUs, us-west-2a and -2b), spot at
1/3.33 of the on-demand price. The job is an evaluation's: 4800 episodes of 36 s on one slot, so a
preemption loses at most 36 s beyond the boot, and B = d. Prints, per trace, deadline and policy,
the cost relative to on-demand (the whole job on on-demand, boot included), the work done on spot
(hours of the 48) and the share of runs that met the deadline; then the means over the eight traces
beside the paper's Table 3 (job fraction 0.8), and the same means with the traces' values read the
other way round (1 = unavailable), which is the reading the numbers do not use. A benchmark, not a
test: it prints figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from spoteval.placement import parse_workload
from spoteval.placement.availability import Trace, read_trace_file
from spoteval.placement.simulate import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACES = REPO_ROOT / "tests" / "data" / "traces" / "availability" / "1-node" / "aws-10-26-2022"
DEADLINES: Final = (52.0, 60.0)
POLICIES: Final = ("spot_safety_net", "uniform_progress")
LABELS: Final = {"spot_safety_net": "Greedy", "uniform_progress": "Uniform Progress"}
#: Table 3 of the paper: spot hours of the 48, job fraction 0.8, mean over the same eight traces
PAPER_SPOT_HOURS: Final = {"spot_safety_net": 17.2, "uniform_progress": 22.9, "omniscient": 27.4}


def workload(deadline: float) -> Any:
    return parse_workload(
        {
            "episodes": 4800,
            "episode_minutes": 0.6,
            "concurrency": 1,
            "lifetime_hours": 1,  # not used: spot capacity is the trace's
            "restart": {"wait_minutes": 0, "boot_minutes": 12},
            "prices": {"spot": 1.0, "on_demand": 3.33},
            "deadline_hours": deadline,
        }
    )


def inverted(trace: Trace) -> Trace:
    """The same file read the other way round: 1 = no capacity (the simulator's internal reading)."""
    return Trace(trace.source, trace.gap_seconds, trace.kind, trace.values, reading="preempted")


Means = dict[tuple[float, str], list[float]]


def measure(traces: Sequence[Trace], runs: int, seed: int, *, show: bool) -> tuple[Means, Means]:
    """Spot hours and cost relative to on-demand per (deadline, policy) over the traces; with
    `show`, a line per trace."""
    hours: Means = {}
    costs: Means = {}
    for trace in traces:
        for deadline in DEADLINES:
            sim = simulate(
                workload(deadline), runs=runs, seed=seed, trace=trace, strategies=(*POLICIES, "on_demand")
            )
            od = sim.strategies["on_demand"].mean_cost
            cells = []
            for name in POLICIES:
                r = sim.strategies[name]
                hours.setdefault((deadline, name), []).append(r.spot_work_hours)
                costs.setdefault((deadline, name), []).append(r.mean_cost / od)
                cells.append(f"{r.mean_cost / od:5.3f} {r.spot_work_hours:5.1f} {r.p_deadline:4.2f}")
            if show:
                up = float(trace.up().mean())
                print(f"  {Path(trace.source).stem:<18} {up:5.0%}  {deadline:4.0f} h   " + "   ".join(cells))
    return hours, costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=300, help="start times per trace (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    args = parser.parse_args(argv)
    traces = [read_trace_file(path) for path in sorted(TRACES.glob("*.json"))]
    start = time.perf_counter()
    print(f"Can't Be Late setting: 48 h job, d = 0.2 h, {args.runs} start times per trace, seed {args.seed}")
    print("  cost = mean cost / on-demand's; spot h = work done on spot (of 48 h); met = p(deadline)")
    print(
        f"  {'trace':<18} {'up':>5}  {'ddl':>6}   Greedy: cost spot h met   Uniform Progress: cost spot h met"
    )
    hours, costs = measure(traces, args.runs, args.seed, show=True)
    print()
    print("Means over the eight traces: spot hours of 48, and cost relative to on-demand")
    print("(paper: Table 3, job fraction 0.8, i.e. 60 h)")
    for deadline in DEADLINES:
        row = "   ".join(
            f"{LABELS[n]} {statistics.fmean(hours[(deadline, n)]):5.1f} h, "
            f"cost {statistics.fmean(costs[(deadline, n)]):.3f}"
            for n in POLICIES
        )
        paper = (
            f"   (paper: Greedy {PAPER_SPOT_HOURS['spot_safety_net']}, Uniform Progress "
            f"{PAPER_SPOT_HOURS['uniform_progress']}, omniscient {PAPER_SPOT_HOURS['omniscient']})"
            if deadline == 60.0
            else ""
        )
        print(f"  {deadline:.0f} h: {row}{paper}")
    other, _ = measure([inverted(t) for t in traces], args.runs, args.seed, show=False)
    row = "   ".join(f"{LABELS[n]} {statistics.fmean(other[(60.0, n)]):5.1f}" for n in POLICIES)
    print(f"  60 h, the values read as 1 = unavailable (not the reading used): {row}")
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
