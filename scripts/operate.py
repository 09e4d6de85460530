"""The operator: after a preemption, start the node again within the grant; stop it when the run is done.

    python -m scripts.operate --stack NAME [--once] [--interval 60]
    python -m scripts.operate status --stack NAME [--json]
    python -m scripts.operate --outputs outputs.json --grant grant.yaml [--once]

Without `--once` it checks every node every `--interval` seconds until each is done or stopped for
good (one progress line per node and check); with `--once` it checks once (for cron or a scheduler).
Either way it first takes the run's operator lease (spoteval/operate/lease.py): while another
operator holds it, this one only reads and says so in one line (`--once`: then exits; without: it
waits and takes over when the other lets go or falls silent for the lease's ttl); a finished run
exits at once. `status` answers from the stack's outputs, each node's provider state, the run record
and the lease, and starts nothing. Exit codes: 0 checked (or answered, or only read), 1 stopped
because the grant refuses a start that only a wider grant allows (budget, max runtime, region,
instance type), 2 bad input (a stack without outputs, credentials that cannot read a node: nothing
is started, nothing written), 130 interrupted.
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
from spoteval.operate.inputs import Inputs, OperateError, load_inputs, open_planes, plane_config
from spoteval.operate.lease import DEFAULT_TTL_S, FINISHED, HELD, MIN_TTL_S, OperatorLease, Standing
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


def _ttl(value: str) -> float:
    number = _positive(value)
    if number < MIN_TTL_S:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least {MIN_TTL_S:g}")
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
    p.add_argument(
        "--lease-ttl",
        type=_ttl,
        default=DEFAULT_TTL_S,
        metavar="S",
        help="the operator lease expires this long after its holder's last renewal (default 120)",
    )
    p.add_argument("--json", action="store_true", help="print the statuses as JSON")
    return p


def _stamp() -> str:
    return datetime.now().astimezone().strftime("%H:%M:%S")


def _status(inputs: Inputs, operator: Operator, standing: Standing, as_json: bool) -> int:
    statuses = operator.status()
    if as_json:
        doc = {
            "run_id": inputs.outputs.run_id,
            "nodes": [s.to_json() for s in statuses],
            "operator": standing.to_json(),
        }
        print(json.dumps(doc, indent=2))
        return 0
    for s in statuses:
        state = f"{s.state.status} ({s.state.raw})" if s.state else "unknown"
        print(f"{s.node}: {s.label}; provider: {state}; {s.detail}")
    print(f"operator: {standing.summary()}")
    return 0


def run(args: argparse.Namespace) -> int:
    inputs = load_inputs(
        stack=args.stack, outputs_file=args.outputs, stacks_dir=Path(args.stacks_dir), grant_file=args.grant
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
    )
    if args.command == "status":
        return _status(inputs, operator, standing, args.json)
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
