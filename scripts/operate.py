"""The operator: after a preemption, start the node again within the grant; stop it when the run is done.

    python -m scripts.operate --stack NAME [--once] [--interval 60]
    python -m scripts.operate status --stack NAME [--json]
    python -m scripts.operate --outputs outputs.json --grant grant.yaml [--once]

Without `--once` it checks every node every `--interval` seconds until each is done or stopped for
good (one progress line per node and check); with `--once` it checks once (for cron or a scheduler).
`status` answers from the stack's outputs, each node's provider state and the run record, and
starts nothing. Exit codes: 0 checked (or answered), 1 stopped because the grant refuses a start
that only a wider grant allows (budget, max runtime, region, instance type), 2 bad input (a stack
without outputs, credentials that cannot read a node: nothing is started), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Final

from spoteval.cli import OneLineParser
from spoteval.clouds import ControlPlaneError
from spoteval.config_reader import DocumentError
from spoteval.grant import GrantError
from spoteval.operate import Operator, Timing
from spoteval.operate.inputs import OperateError, deadline_watch, load_inputs, open_planes, plane_config
from spoteval.operate.loop import blocked
from spoteval.record import RecordError
from spoteval.store import Store, StoreError

PROG: Final = "operate"


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be > 0")
    return number


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scripts.operate",
        description="Restart preempted nodes within the grant; stop them when the run is done.",
    )
    p.add_argument("command", nargs="?", choices=("run", "status"), default="run")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--stack", metavar="NAME", help="read `pulumi stack output --json` and the stack's grant"
    )
    src.add_argument("--outputs", metavar="FILE.json", help="the stack's outputs, as pulumi prints them")
    p.add_argument("--grant", metavar="FILE", help="a grant (YAML or JSON); overrides the stack's")
    p.add_argument("--stacks-dir", default="stacks", help="where Pulumi.NAME.yaml is (default: stacks)")
    p.add_argument("--once", action="store_true", help="check every node once, then exit (cron)")
    p.add_argument("--interval", type=_positive, default=60.0, metavar="S", help="seconds between checks")
    p.add_argument(
        "--backoff", type=_positive, default=60.0, metavar="S", help="first wait after no capacity"
    )
    p.add_argument("--backoff-max", type=_positive, default=900.0, metavar="S", help="longest capacity wait")
    p.add_argument("--price", type=_positive, metavar="PER_HOUR", help="the price where no API gives one")
    p.add_argument("--poll", type=_positive, default=5.0, metavar="S", help="seconds between state reads")
    p.add_argument("--start-timeout", type=_positive, default=1800.0, metavar="S")
    p.add_argument("--stop-timeout", type=_positive, default=900.0, metavar="S")
    p.add_argument("--json", action="store_true", help="print the statuses as JSON")
    return p


def _stamp() -> str:
    return datetime.now().astimezone().strftime("%H:%M:%S")


def run(args: argparse.Namespace) -> int:
    inputs = load_inputs(
        stack=args.stack, outputs_file=args.outputs, stacks_dir=Path(args.stacks_dir), grant_file=args.grant
    )
    planes = open_planes(inputs, plane_config(inputs, poll_s=args.poll, price=args.price))
    for node, plane in planes.items():  # credentials that cannot read a node: stop here, start nothing
        try:
            plane.state()
        except ControlPlaneError as exc:
            raise OperateError(f"node {node}: cannot read its state: {exc}") from None
    timing = Timing(args.interval, args.backoff, args.backoff_max, args.stop_timeout)
    operator = Operator(
        inputs.outputs,
        planes,
        inputs.grant,
        Store(inputs.outputs.bucket_url),
        timing=timing,
        start_timeout_s=args.start_timeout,
        say=lambda line: print(f"[{_stamp()}] {line}", flush=True),
        watch=deadline_watch(inputs),
    )
    if args.command == "status":
        statuses = operator.status()
        advice = operator.deadline_advice(statuses)
        command = operator.watch.command(advice) if operator.watch and advice else None
        if args.json:
            nodes = [s.to_json() for s in statuses]
            found = {**advice.to_json(), "command": command} if advice else None
            print(json.dumps({"run_id": inputs.outputs.run_id, "nodes": nodes, "deadline": found}, indent=2))
        else:
            for s in statuses:
                state = f"{s.state.status} ({s.state.raw})" if s.state else "unknown"
                print(f"{s.node}: {s.label}; provider: {state}; {s.detail}")
            if advice is not None:
                print(advice.text(command))
        return 0
    print(
        f"operating run {inputs.outputs.run_id} ({inputs.source}, {inputs.outputs.provider}): "
        f"{len(planes)} node(s), checks every {args.interval:g} s" + (" (once)" if args.once else ""),
        flush=True,
    )
    if args.once:
        operator.check_all()
        return 0
    lines = operator.run()
    refused = [line.node for line in lines if blocked(line)]
    if refused:
        print(
            f"{PROG}: the grant refuses to start {', '.join(refused)}: widen it and run again",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (OperateError, ControlPlaneError, GrantError, StoreError, RecordError, DocumentError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
