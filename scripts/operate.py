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
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Final

from spoteval.cli import OneLineParser, add_deployed_stack_options, positive_number
from spoteval.clouds import ControlPlaneError
from spoteval.config_reader import DocumentError
from spoteval.grant import GrantError
from spoteval.operate import Operator, Timing
from spoteval.operate.inputs import (
    OperateError,
    load_inputs,
    open_planes,
    plane_config,
    refuse_out_of_context,
)
from spoteval.operate.loop import blocked
from spoteval.record import RecordError
from spoteval.store import Store, StoreError

PROG: Final = "operate"


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scripts.operate",
        description="Restart preempted nodes within the grant; stop them when the run is done. `status` "
        "says what each node is doing and starts nothing.",
        epilog="Exit codes: 0 checked (or answered), 1 the grant refuses a start only a wider grant allows, "
        "2 bad input (one line, nothing started), 130 interrupted.",
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=("run", "status"),
        default="run",
        help="run: check and act until the run is done (or once, with --once); status: what each node is "
        "doing, nothing started (default: %(default)s)",
    )
    add_deployed_stack_options(p)
    p.add_argument(
        "--once", action="store_true", help="check every node once, then exit (cron, a scheduler, CI)"
    )
    for flag, default, what in (
        ("--interval", 60.0, "seconds between checks"),
        ("--backoff", 60.0, "the first wait after the provider had no capacity; it doubles on each refusal"),
        ("--backoff-max", 900.0, "the longest wait between tries for capacity"),
        ("--poll", 5.0, "seconds between state reads while a node starts or stops"),
        ("--start-timeout", 1800.0, "seconds a start may take before it is a failed start"),
        ("--stop-timeout", 900.0, "seconds a stop may take before it is a failed stop"),
    ):
        p.add_argument(
            flag, type=positive_number, default=default, metavar="S", help=f"{what} (default: %(default)g)"
        )
    p.add_argument(
        "--price",
        type=positive_number,
        metavar="PER_HOUR",
        help="the price per hour where no API gives one (default: the stack's workload.prices for its "
        "market)",
    )
    p.add_argument("--json", action="store_true", help="with status: print the statuses as one JSON object")
    return p


def _stamp() -> str:
    return datetime.now().astimezone().strftime("%H:%M:%S")


def run(args: argparse.Namespace) -> int:
    refuse_out_of_context(args)
    inputs = load_inputs(
        stack=args.stack,
        outputs_file=args.outputs,
        stacks_dir=Path(args.stacks_dir) if args.stacks_dir else None,
        grant_file=args.grant,
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
    )
    if args.command == "status":
        statuses = operator.status()
        if args.json:
            print(
                json.dumps(
                    {"run_id": inputs.outputs.run_id, "nodes": [s.to_json() for s in statuses]}, indent=2
                )
            )
        else:
            for s in statuses:
                state = f"{s.state.status} ({s.state.raw})" if s.state else "unknown"
                print(f"{s.node}: {s.label}; provider: {state}; {s.detail}")
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
