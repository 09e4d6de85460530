"""The run report: allocations, tau, restart cost S, episodes, cost, efficiency, and the next placement.

    python -m scripts.report --store URL --run ID [--shared] [--json] [--plot FILE.png] [--workload FILE]
    python -m scripts.report --stack NAME [--outputs FILE.json] [--provider-events] ...

`--stack NAME` finds the store and the run in the stack's outputs (`bucket_url`, `run_id`), read with
`pulumi stack output --json --stack NAME`, or from `--outputs FILE.json` (the same outputs saved to a
file); the stack's `spot-eval:workload` block in `stacks/Pulumi.NAME.yaml`, under the stack's
`spot-eval:grant`, then supplies what the record cannot know (other options' prices, deadline).
`--workload FILE` gives those keys directly; with neither, the next placement is decided from the
record alone (only spot priced), or not at all when the record lacks a number it needs: the
report says which, and never borrows the built-in example.
`--provider-events` first reads the stack's event capture (its `event_capture` output) and records
each interruption or stop the provider logged, once (spoteval/events/).

Credentials and endpoints for s3://, gs:// and az:// come from the standard environment (AWS_*,
GOOGLE_*, AZURE_* variables), as for the other scripts. Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from spoteval import report
from spoteval.report import build
from spoteval.report.command import UsageError, run_report

#: `build` stays importable from here for callers of the old name (it lives in spoteval.report).
__all__ = ["build", "main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scripts.report",
        description="Report a run from its record: lifetimes, restart cost, episodes, cost, efficiency, "
        "and the placement for the next run.",
        epilog="Exit codes: 0 reported, 2 bad input (one line on stderr).",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="the store holding the run record: s3://bucket/prefix, gs://, az://container/prefix, "
        "file:///path (with --run)",
    )
    p.add_argument("--run", metavar="ID", help="the run id (with --store)")
    p.add_argument(
        "--stack",
        metavar="NAME",
        help="the store and run id from this stack's outputs (pulumi stack output, or --outputs), and "
        "what the record cannot know from its spot-eval:workload block under its spot-eval:grant",
    )
    p.add_argument(
        "--stacks-dir",
        metavar="DIR",
        help="where Pulumi.NAME.yaml is (with --stack; default: stacks/ here, else the repository's)",
    )
    p.add_argument(
        "--outputs",
        metavar="FILE.json",
        help="with --stack: its outputs saved as JSON (pulumi stack output --json > FILE.json), "
        "instead of asking pulumi",
    )
    p.add_argument(
        "--workload",
        metavar="FILE",
        help="a workload YAML for what the record cannot know (other prices, deadline, grant) and "
        "what the run did not measure (default: the stack's block, else none: the record alone)",
    )
    p.add_argument(
        "--shared",
        action="store_true",
        help="for sharing: no ids, addresses, bucket or account names, or prices",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write a timeline per node and episodes over time")
    p.add_argument(
        "--provider-events",
        action="store_true",
        help="with --stack: first record the interruptions and stops in the stack's event capture",
    )
    return p


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


def run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    parser.__class__ = _Parser
    options = vars(parser.parse_args(argv))
    options["as_json"] = options.pop("json")
    sys.stdout.write(run_report(**options))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except (UsageError, report.ReportError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
