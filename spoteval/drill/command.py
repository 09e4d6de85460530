"""The drill command: run the drill, then report its record with the placement for the next run.

`run_command(cfg, ...)` is what `python -m scripts.drill` calls once its options are parsed: it runs
the drill with a progress display, builds the run report (spoteval.report) while the store still
serves it (with `--store s3` the record ends with the moto server), writes `timeline.png`,
`report.txt` and `report.json` into the drill's folder, and prints the summary and the report (or
the report as JSON). Exit code: 0 the run finished, 1 it did not finish in time, 3 every episode
ended in a harness error (the first reason on stderr: a run that measured nothing of the model never
reports success).
"""

from __future__ import annotations

import json
import sys

from spoteval import report
from spoteval.drill.config import DrillConfig, DrillError, DrillResult
from spoteval.drill.controller import Drill
from spoteval.drill.display import Display
from spoteval.report.command import UsageError, workload_base
from spoteval.report.failures import HarnessFailures, harness_failures
from spoteval.store import Store, StoreError

EXIT_HARNESS_ERRORS = 3


def report_of(result: DrillResult) -> report.RunReport:
    """The run report of a finished drill, with the placement decision for the next run."""
    try:
        store = Store(result.store_url, result.store_options)
    except StoreError as exc:
        raise DrillError(str(exc)) from None
    # one reading of the run: the base the drill wrote (its prices, its capacity delay as W) is read
    # back as `scripts.report --workload` and `scripts.placement --from-run` read it
    try:
        base = workload_base(str(result.config.out / "workload.json"))
    except UsageError as exc:
        raise DrillError(str(exc)) from None
    return report.build(store, result.run_id, base)


def summary(result: DrillResult, failures: HarnessFailures | None = None) -> str:
    secs = (result.ended - result.started).total_seconds()
    in_flight = sum(len(k.in_flight) for k in result.kills)
    lines = [
        f"Drill: {result.results}/{result.episodes} episodes have a result after {secs:.0f} s; "
        + ("" if result.config.nodes == 1 else f"{result.config.nodes} nodes, ")
        + f"{result.incarnations} node start(s), {len(result.kills)} preemption(s) "
        f"({in_flight} episode(s) in flight at the notices)" + ("" if result.finished else "; NOT FINISHED"),
    ]
    lines += [f"  note: {n}" for n in result.notes]
    if failures is not None and failures.count:
        lines.append(failures.line() + ":")
        lines += [f"  {episode}: {why}" for episode, why in failures.first]
    return "\n".join(lines) + "\n"


def run_command(cfg: DrillConfig, *, as_json: bool = False, shared: bool = False) -> int:
    """Run the drill and report it (see the module docstring); DrillError for what stops it."""
    runner = Drill(cfg)
    try:
        with Display(cfg.episodes if cfg.manifest is None else 0) as display:
            runner.display = display
            result = runner.run()
        rep = report_of(result)  # before close(): with --store s3 the record lives in the moto server
    finally:
        runner.close()
    out = cfg.out.resolve()
    png = out / "timeline.png"
    report.plot_timeline(rep, str(png))
    (out / "report.txt").write_text(report.render(rep))
    (out / "report.json").write_text(json.dumps(report.report_json(rep), indent=2, sort_keys=True) + "\n")
    failures = harness_failures(rep.record.results, result.episodes)
    if as_json:
        print(json.dumps(report.report_json(rep, shared=shared), indent=2, sort_keys=True))
    else:
        sys.stdout.write(summary(result, failures))
        sys.stdout.write("\n" + report.render(rep, shared=shared))
        again = (
            f"python -m scripts.report --store {result.store_url} --run {result.run_id} "
            f"--workload {out / 'workload.json'}"
        )
        decide = (
            f"python -m scripts.placement {out / 'workload.json'} --from-run {result.run_id} "
            f"--store {result.store_url}"
        )
        nodes = "agent.json, node/logs/" if result.config.nodes == 1 else "agent*.json, node-*/logs/"
        print(
            f"\nFiles in {out}: timeline.png, report.txt, report.json, drill.json, operator.json, "
            f"workload.json, manifest.jsonl, {nodes}"
        )
        if result.store_url.startswith("file://"):
            print(f"Report again: {again}")
            print(f"Decide again: {decide}")
    if failures.every_episode:
        why = failures.first[0][1] if failures.first else "no reason recorded"
        print(f"drill: every episode ended in a harness error ({failures.count}): {why}", file=sys.stderr)
        return EXIT_HARNESS_ERRORS
    return 0 if result.finished else 1
