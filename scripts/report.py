"""The run report: allocations, tau, restart cost S, episodes, cost, efficiency, and the next placement.

    python -m scripts.report --store URL --run ID [--shared] [--json] [--plot FILE.png] [--workload FILE]
    python -m scripts.report --stack NAME [--outputs FILE.json] ...

`--stack NAME` finds the store and the run in the stack's outputs (`bucket_url`, `run_id`), read with
`pulumi stack output --json --stack NAME`, or from `--outputs FILE.json` (the same outputs saved to a
file); the stack's `spot-eval:workload` block in `stacks/Pulumi.NAME.yaml` then supplies what the
record cannot know (other options' prices, deadline, grant). `--workload FILE` gives those keys
directly; with neither, they come from the placement's built-in example and the report says so.

Credentials and endpoints for s3://, gs:// and az:// come from the standard environment (AWS_*,
GOOGLE_*, AZURE_* variables), as for the other scripts. Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from spoteval import placement, report
from spoteval.placement import PlacementError
from spoteval.store import Store, StoreError

if TYPE_CHECKING:
    from scripts.placement import LoadedWorkload

REPO = Path(__file__).resolve().parent.parent


class UsageError(Exception):
    """Bad input: names the argument, file or key."""


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None


def stack_outputs(stack: str, outputs_file: str | None) -> Mapping[str, Any]:
    """The stack's outputs, from a saved file or from the Pulumi CLI."""
    if outputs_file:
        data = _read_json(outputs_file)
    else:
        if shutil.which("pulumi") is None:
            raise UsageError(
                f"--stack {stack}: the pulumi CLI is not on PATH; save the outputs with "
                "`pulumi stack output --json` and pass --outputs FILE.json"
            )
        proc = subprocess.run(
            ["pulumi", "stack", "output", "--json", "--stack", stack],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise UsageError(f"--stack {stack}: pulumi stack output failed: {first}")
        try:
            data = json.loads(proc.stdout)
        except ValueError as exc:
            raise UsageError(f"--stack {stack}: pulumi stack output is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--stack {stack}: the outputs are not a JSON object")
    for key in ("bucket_url", "run_id"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UsageError(f"--stack {stack}: the outputs have no {key!r}")
    return data


def stack_workload(stack: str) -> Mapping[str, Any] | None:
    """The `spot-eval:workload` block of stacks/Pulumi.NAME.yaml, when the file has one."""
    path = REPO / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.exists():
        return None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    block = (doc.get("config") or {}).get("spot-eval:workload") if isinstance(doc, dict) else None
    return block if isinstance(block, dict) else None


def read_workload(path: str) -> Mapping[str, Any]:
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: a workload is a mapping of keys")
    return doc


def decide(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The placement decision for a workload mapping, as `python -m scripts.placement --json` prints it:
    the same closed form, the same Monte-Carlo (default runs and seed) for spot's deadline chance."""
    from scripts import placement as placement_cli  # lazy: scripts.placement imports this module's hook

    args = placement_cli.build_parser().parse_args([])
    return placement_cli.decide(args, placement.parse_workload(raw)).document()


class FromRun:
    """`--from-run ID --store URL` for `python -m scripts.placement` (an entry of its INPUT_HOOKS).

    The workload the placement loaded (file, stack or built-in example) keeps what a run record
    cannot know (other options' prices, deadline, grant); the numbers the run measured replace the
    rest: episode length samples, concurrency, tau and its interval, W, B, the spot price, episodes.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("numbers measured in a run record")
        group.add_argument("--from-run", metavar="RUN_ID", help="use the numbers this run measured")
        group.add_argument(
            "--store", metavar="URL", help="the store holding the run record (with --from-run)"
        )

    def apply(self, args: argparse.Namespace, loaded: LoadedWorkload) -> LoadedWorkload:
        run_id = getattr(args, "from_run", None)
        if not run_id:
            return loaded
        url = getattr(args, "store", None)
        if not url:
            raise PlacementError("--from-run", "needs --store URL, the store that holds the run record")
        try:
            rep = report.analyse(report.load_run(Store(url), run_id))
        except (StoreError, report.ReportError) as exc:
            raise PlacementError("--from-run", str(exc)) from None
        raw = report.workload_from_run(rep, loaded.raw)
        source = f"{loaded.source}, with the numbers measured in run {run_id}"
        return dataclasses.replace(loaded, raw=raw, source=source)


def build(
    store: Store,
    run_id: str,
    base: Mapping[str, Any] | None,
    base_source: str,
) -> report.RunReport:
    """Load, analyse, and attach the placement decision for the next run."""
    rep = report.analyse(report.load_run(store, run_id))
    workload = report.workload_from_run(rep, base)
    rep = report.with_placement(rep, decide, workload)
    missing = report.unmeasured(rep)
    if rep.placement is not None:
        note = base_source
        if missing:
            note += "; not measured in this run, so from there too: " + ", ".join(missing)
        rep = dataclasses.replace(rep, placement_note=note)
    elif missing:
        given = ", ".join(missing)
        note = f"{rep.placement_note}; not measured in this run: {given}: give them in --workload FILE"
        rep = dataclasses.replace(rep, placement_note=note)
    return rep


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scripts.report",
        description="Report a run from its record: lifetimes, restart cost, episodes, cost, efficiency.",
    )
    p.add_argument(
        "--store", help="store URL: s3://bucket/prefix, gs://, az://container/prefix, file:///path"
    )
    p.add_argument("--run", help="run id")
    p.add_argument("--stack", help="read the store and run id from this stack's outputs")
    p.add_argument("--outputs", help="the stack's outputs saved as JSON (instead of asking pulumi)")
    p.add_argument("--workload", help="workload YAML for what the record cannot know (prices, deadline)")
    p.add_argument("--shared", action="store_true", help="no ids, addresses, bucket or account names, prices")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--plot", metavar="FILE.png", help="write a timeline per node and episodes over time")
    return p


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


def run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    parser.__class__ = _Parser
    args = parser.parse_args(argv)
    base: Mapping[str, Any] | None = None
    base_source = ""
    if args.stack:
        if args.store or args.run:
            raise UsageError("--stack replaces --store and --run: give one or the other")
        outputs = stack_outputs(args.stack, args.outputs)
        url, run_id = str(outputs["bucket_url"]), str(outputs["run_id"])
        base = stack_workload(args.stack)
        if base is not None:
            base_source = f"prices, deadline and grant from stacks/Pulumi.{args.stack}.yaml"
    else:
        if not args.store or not args.run:
            raise UsageError("give --store URL and --run ID (or --stack NAME)")
        url, run_id = args.store, args.run
    if args.workload:
        base = read_workload(args.workload)
        base_source = f"prices, deadline and grant from {args.workload}"
    if base is None:
        base = {k: v for k, v in placement.EXAMPLE_WORKLOAD.items() if k not in ("lifetime_hours",)}
        base_source = "prices, deadline and grant from the built-in example workload (give --workload FILE)"
    try:
        store = Store(url)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    rep = build(store, run_id, base, base_source)
    if args.plot:
        try:
            report.plot_timeline(rep, args.plot, shared=args.shared)
        except OSError as exc:
            raise UsageError(f"--plot {args.plot}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(report.report_json(rep, shared=args.shared), indent=2, sort_keys=True))
    else:
        sys.stdout.write(report.render(rep, shared=args.shared))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except (UsageError, report.ReportError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
