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
import math
import sys
from collections.abc import Sequence

from rich.console import Console

from spoteval.cli import OneLineParser
from spoteval.clouds import ControlPlaneError
from spoteval.grant import GrantError
from spoteval.measure import PROG, MeasureError, Options, run
from spoteval.record import RecordError
from spoteval.store import StoreError

# --- entry point --------------------------------------------------------------------------------


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be > 0")
    return number


def _cycles(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a whole number >= 1")
    return int(value)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scripts.measure_restart",
        description="Measure the restart cost S on a deployed stack with forced stop/start cycles.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--stack", metavar="NAME", help="read `pulumi stack output --json` and the stack's grant"
    )
    src.add_argument("--outputs", metavar="FILE.json", help="the stack's outputs, as pulumi prints them")
    p.add_argument("--grant", metavar="FILE", help="a grant (YAML or JSON); overrides the stack's")
    p.add_argument("--stacks-dir", default="stacks", help="where Pulumi.NAME.yaml is (default: stacks)")
    p.add_argument("--node", help="which of the stack's node_ids (default: the first)")
    p.add_argument("--cycles", type=_cycles, default=3)
    p.add_argument("--mode", choices=("stop-start", "preempt"), default="stop-start")
    p.add_argument("--health-url", help="the model server's base URL (default: http://ADDRESS:server_port)")
    p.add_argument("--yes", action="store_true", help="really stop and start the node (else: show the plan)")
    p.add_argument("--leave", choices=("stopped", "running"), default="stopped")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="stacked bars of the phases per cycle")
    p.add_argument("--wait-ready", action="store_true", help="also wait for the agent's ready event")
    p.add_argument(
        "--price",
        type=_positive,
        metavar="PER_HOUR",
        help="the price when no API gives one (default: the stack's workload.prices for its market)",
    )
    p.add_argument("--fis-template", metavar="ID", help="AWS FIS experiment template for --mode preempt")
    p.add_argument("--gcp-project", help="GCP project of the instance (default: the stack's gcp.project)")
    p.add_argument("--azure-subscription", help="Azure subscription (default: AZURE_SUBSCRIPTION_ID)")
    p.add_argument("--azure-resource-group", help="default: the stack's azure.resource_group")
    p.add_argument("--k8s-namespace", help="default: the stack's k8s.namespace, else spot-eval")
    p.add_argument("--k8s-deployment", help="the model server's Deployment (default: RUN_ID-server)")
    p.add_argument("--poll", type=_positive, default=5.0, metavar="S", help="seconds between state reads")
    p.add_argument("--stop-timeout", type=_positive, default=900.0, metavar="S")
    p.add_argument("--start-timeout", type=_positive, default=1800.0, metavar="S")
    p.add_argument("--serve-timeout", type=_positive, default=1800.0, metavar="S")
    p.add_argument("--ready-timeout", type=_positive, default=900.0, metavar="S")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    options = Options(**vars(parser().parse_args(argv)))
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
