"""The operator: after a preemption, start the node again within the grant; stop it when the run is done.

    python -m scripts.operate --stack NAME [--once] [--interval 60]
    python -m scripts.operate status --stack NAME [--json]
    python -m scripts.operate --outputs outputs.json --grant grant.yaml [--once]

Without `--once` it checks every node every `--interval` seconds until each is done or stopped for
good (one progress line per node and check); with `--once` it checks once (for cron or a scheduler).
Either way it first takes the run's operator lease (spoteval/operate/lease.py): while another operator
holds it, this one only reads and says so in one line (`--once`: then exits; without: it waits and
takes over when the other lets go or falls silent for the lease's ttl); a finished run exits at once.
With a deadline in the stack's workload it also says when the spot policy's rule asks to flip the
stack (spoteval/operate/deadline.py). `status` answers from the outputs, each node's provider state,
the record, the lease and that rule, and starts nothing. Exit codes: 0 checked (or answered, or only
read), 1 stopped because the grant refuses a start only a wider grant allows (budget, max runtime,
region, instance type), 2 bad input (a stack without outputs, credentials that cannot read a node:
nothing started or written), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Final

from spoteval.cli import OneLineParser, add_deployed_stack_options, add_price_option, positive_number
from spoteval.clouds import ControlPlaneError
from spoteval.config_reader import DocumentError
from spoteval.grant import GrantError
from spoteval.operate import Operator, Timing
from spoteval.operate.inputs import (
    Inputs,
    OperateError,
    load_inputs,
    open_planes,
    plane_config,
    refuse_out_of_context,
)
from spoteval.operate.lease import DEFAULT_TTL_S, FINISHED, HELD, MIN_TTL_S, OperatorLease
from spoteval.operate.loop import blocked
from spoteval.operate.status import status_text
from spoteval.record import RecordError
from spoteval.store import Store, StoreError

PROG: Final = "operate"


def _ttl(value: str) -> float:
    number = positive_number(value)
    if number < MIN_TTL_S:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least {MIN_TTL_S:g}")
    return number


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
    add_price_option(p)
    p.add_argument(
        "--lease-ttl",
        type=_ttl,
        default=DEFAULT_TTL_S,
        metavar="S",
        help="the operator lease expires this long after its holder's last renewal (default: %(default)g)",
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
    store = Store(inputs.outputs.bucket_url)
    lease = OperatorLease(store, inputs.outputs.run_id, ttl_s=args.lease_ttl)
    standing = lease.peek()
    if args.command == "run" and standing.kind == FINISHED:  # before any provider call
        print(standing.line(), flush=True)
        return 0
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
        store,
        timing=timing,
        start_timeout_s=args.start_timeout,
        say=lambda line: print(f"[{_stamp()}] {line}", flush=True),
        lease=lease,
        watch=inputs.watch,
    )
    if args.command == "status":
        statuses = operator.status()
        deadline = operator.deadline_report(statuses)
        print(status_text(inputs.outputs.run_id, statuses, standing, as_json=args.json, deadline=deadline))
        return 0
    try:
        return _operate(args, inputs, operator, lease)
    finally:
        lease.release()  # a no-op once the run let it go; after an error the next run takes it at once


def _operate(args: argparse.Namespace, inputs: Inputs, operator: Operator, lease: OperatorLease) -> int:
    standing = lease.take()
    if standing.kind != HELD:
        if args.once or standing.kind == FINISHED:
            print(standing.line(), flush=True)
            return 0
        waiting = "it takes over when that one lets go or falls silent"
        print(f"[{_stamp()}] {standing.line()}; {waiting}", flush=True)
    else:
        once = " (once)" if args.once else ""
        print(
            f"operating run {inputs.outputs.run_id} ({inputs.source}, {inputs.outputs.provider}): "
            f"{len(operator.planes)} node(s), checks every {args.interval:g} s{once}",
            flush=True,
        )
        if standing.took_over:
            print(f"[{_stamp()}] {standing.line()}", flush=True)
    operator.standing = standing
    if args.once:
        operator.once()
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
