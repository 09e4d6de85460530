"""Measure the restart cost S on a deployed stack: forced stop/start (or preemption) cycles.

    python -m scripts.measure_restart --stack NAME [--cycles 3] [--mode stop-start|preempt] [--yes]
    python -m scripts.measure_restart --outputs outputs.json [--grant grant.yaml] ...

Without `--yes` it prints the plan (node, cycles, state and price now, the most it can cost) and
changes nothing. With `--yes`, each cycle:

  stop         stop requested -> stopped (`--mode preempt`: `preempt`, the provider takes the node)
  price_check  the price read and the grant checked (a price above the cap refuses the start)
  start        start requested -> running: the capacity wait (S_wait, not billed)
  serve        running -> the model server answers /v1/models (boot, image, weights, warm-up)
  first_token  -> a one-token /v1/completions answered
  agent_ready  -> the agent's `ready` event is in the run record (`--wait-ready`)

S_wait = start; S_boot = serve + first_token + agent_ready; S = S_wait + S_boot. Every stop, start
and preemption is written to the run record with its reason and price, and each measured cycle
as a `heartbeat` with the phase timings. Exit codes: 0 done (or the plan shown), 1 the
measurement failed or the grant refused a start, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from spoteval.cli import OneLineParser, add_deployed_stack_options, add_price_option, positive_number
from spoteval.clouds import ControlPlaneError
from spoteval.grant import GrantError
from spoteval.measure import PROG, MeasureError, Options, run
from spoteval.measure.command import refuse_out_of_context
from spoteval.record import RecordError
from spoteval.store import StoreError

# --- entry point --------------------------------------------------------------------------------


def _cycles(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a whole number >= 1")
    return int(value)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scripts.measure_restart",
        description="Measure the restart cost S on a deployed stack with forced stop/start cycles. Without "
        "--yes it prints the plan (state and price now, the most it can cost) and changes nothing.",
        epilog="Exit codes: 0 measured (or the plan shown), 1 the measurement failed or the grant refused "
        "a start, 2 bad input (one line), 130 interrupted.",
    )
    add_deployed_stack_options(p)
    p.add_argument(
        "--node", metavar="ID", help="which of the stack's node_ids to measure (default: the first)"
    )
    p.add_argument(
        "--cycles",
        type=_cycles,
        default=3,
        metavar="N",
        help="how many restarts to measure: each cycle stops the node, reads the price, checks the grant, "
        "starts it and waits for the model server (default: %(default)s)",
    )
    p.add_argument(
        "--mode",
        choices=("stop-start", "preempt"),
        default="stop-start",
        help="stop-start: the node is stopped and started through the provider's API; preempt: the "
        "provider takes it as in a preemption (AWS FIS with --fis-template, Azure simulateEviction, "
        "Kubernetes pod eviction; GCP, Nebius and Runpod: a stop) (default: %(default)s)",
    )
    p.add_argument(
        "--health-url",
        metavar="URL",
        help="the model server's base URL (default: http://ADDRESS:server_port, the address read after "
        "each start)",
    )
    p.add_argument(
        "--yes", action="store_true", help="really stop and start the node (without it: the plan only)"
    )
    p.add_argument(
        "--leave",
        choices=("stopped", "running"),
        default="stopped",
        help="the node's state when the measurement ends or fails: stopped keeps the GPU from billing; "
        "running starts it again after the same grant checks (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the plan or the result as one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="with --yes: stacked bars of the phases per cycle")
    p.add_argument(
        "--wait-ready",
        action="store_true",
        help="also wait for the node agent's `ready` event in the run record (phase agent_ready)",
    )
    add_price_option(p)
    p.add_argument(
        "--fis-template",
        metavar="ID",
        help="with --mode preempt on AWS: the FIS experiment template "
        "(aws:ec2:send-spot-instance-interruptions)",
    )
    _where_options(p)
    _timing_options(p)
    return p


def _where_options(p: argparse.ArgumentParser) -> None:
    """Where the node's name alone does not find it."""
    p.add_argument("--gcp-project", help="GCP project of the instance (default: the stack's gcp.project)")
    p.add_argument("--azure-subscription", help="Azure subscription (default: AZURE_SUBSCRIPTION_ID)")
    p.add_argument(
        "--azure-resource-group", help="the VM's resource group (default: the stack's azure.resource_group)"
    )
    p.add_argument(
        "--k8s-namespace", help="the model server's namespace (default: the stack's k8s.namespace)"
    )
    p.add_argument("--k8s-deployment", help="the model server's Deployment (default: RUN_ID-server)")


def _timing_options(p: argparse.ArgumentParser) -> None:
    """How often the state is read and how long each phase may take."""
    p.add_argument(
        "--poll",
        type=positive_number,
        default=5.0,
        metavar="S",
        help="seconds between state reads (default: %(default)g)",
    )
    for name, default, what in (
        ("stop", 900.0, "the provider to report the node stopped"),
        ("start", 1800.0, "the provider to report the node running (the capacity wait)"),
        ("serve", 1800.0, "the model server to answer after a start"),
    ):
        p.add_argument(
            f"--{name}-timeout",
            type=positive_number,
            default=default,
            metavar="S",
            help=f"seconds to wait for {what}; past it the cycle fails (default: %(default)g)",
        )
    p.add_argument(
        "--ready-timeout",
        type=positive_number,
        metavar="S",
        help="with --wait-ready: seconds to wait for the agent's ready event (default: 900)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        refuse_out_of_context(args)
    except MeasureError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.ready_timeout is None:
        args.ready_timeout = 900.0
    options = Options(**vars(args))
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=140)  # a file or a pipe: no terminal width to fit
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return run(options, out, err)
    except (MeasureError, ControlPlaneError, GrantError, StoreError, RecordError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
