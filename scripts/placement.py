"""Where to run an evaluation: spot, on-demand, or a non-preemptible box, and why.

    python -m scripts.placement [WORKLOAD.yaml] [--stack NAME] [--stacks-dir DIR] [--json]
                                [--plot FILE.png] [--trace FILE] [--trace-values HOW]
                                [--replay {ordered,draw}] [--runs N] [--seed S]
                                [--waits {fixed,exponential,trace}]
    python -m scripts.placement --offers --stack NAME [--stack NAME ...] [...]   (spoteval.offers.command)

The workload comes from a YAML file, from the `spot-eval:workload` block of
`stacks/Pulumi.NAME.yaml` (`--stack NAME`), or, with neither, from the built-in example; the
decision is `spoteval.placement.decide` (closed form, simulation, the spot policy under a deadline).

Exit codes: 0 a decision was made, 3 the decision is `none` (no option is eligible), 2 bad input
(one line on stderr: `error: <key or file>: <problem>`); with `--offers` also 4: no offer could be
priced (spoteval.offers.command).

Extension point: `INPUT_HOOKS` refine the raw workload before it is parsed (for example, numbers
measured in a run record replacing the configured ones); each hook adds its own options.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from spoteval import placement
from spoteval.offers import command as offers
from spoteval.placement import (
    DEFAULT_RUNS,
    DEFAULT_SEED,
    STACK_WORKLOAD_KEY,
    WAIT_MODELS,
    LoadedWorkload,
    PlacementError,
)
from spoteval.placement.render import plot, render_report
from spoteval.report.from_run import FromRun

EXIT_OK, EXIT_BAD_INPUT, EXIT_NONE = 0, 2, 3


class InputHook(Protocol):
    """Refines the raw workload before it is parsed; adds its own command-line options."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def apply(self, args: argparse.Namespace, loaded: LoadedWorkload | None) -> LoadedWorkload | None: ...


#: Hooks applied in order after the workload is loaded (file, stack or example) and before parsing.
INPUT_HOOKS: list[InputHook] = [FromRun()]


def load_workload(args: argparse.Namespace) -> LoadedWorkload:
    """The workload the command line names (file, stack, or the built-in example), after the hooks.

    With a hook that reads a run (`--from-run`) and neither a file nor a stack, the hook starts from
    nothing: the run's own numbers, never the built-in example's."""
    loaded: LoadedWorkload | None
    if args.workload is not None:
        loaded = placement.load_workload_file(Path(args.workload))
    elif args.stack is not None:
        if len(args.stack) > 1:
            raise PlacementError("--stack", "one stack names the workload (several only with --offers)")
        loaded = placement.load_stack_workload(
            args.stack[0], Path(args.stacks_dir) if args.stacks_dir else None
        )
    else:
        loaded = None if getattr(args, "from_run", None) else placement.example_workload()
    for hook in INPUT_HOOKS:
        loaded = hook.apply(args, loaded)
    return loaded if loaded is not None else placement.example_workload()


# --- command line -------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """Option errors are bad input like any other: one line, exit 2."""

    def error(self, message: str) -> Any:
        raise PlacementError("options", message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m scripts.placement",
        description="Decide where to run an evaluation workload: spot, on-demand or non-preemptible.",
        epilog="Exit codes: 0 a decision was made (--offers: an offer is eligible), 3 the decision is 'none' "
        "(--offers: no offer fits the grant), 4 (--offers) no offer could be priced, 2 bad input.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("workload", nargs="?", help="workload YAML file (default: the built-in example)")
    source.add_argument(
        "--stack",
        action="append",
        metavar="NAME",
        help=f"read the {STACK_WORKLOAD_KEY} block of Pulumi.NAME.yaml (with --offers: repeatable)",
    )
    parser.add_argument(
        "--stacks-dir",
        metavar="DIR",
        help="where the stack files are (default: stacks/ here, else the repository's)",
    )
    parser.add_argument("--json", action="store_true", help="print the decision as one JSON document")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write expected cost against tau to a PNG file (with --offers: cost against wall time "
        "per offer)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a spot trace in the simulation (its spot capacity in order, tick by tick; see "
        "--replay), and estimate tau from it (with --offers: --offer-trace)",
    )
    parser.add_argument(
        "--trace-values",
        choices=placement.TRACE_READINGS,
        help="how the trace's values read: count, the number of instances up (the published files); "
        "preempted, non-zero where there is no capacity (default: count)",
    )
    parser.add_argument(
        "--replay",
        choices=placement.REPLAY_MODES,
        help="ordered: the trace's spot capacity in order, tick by tick; draw: its lifetimes and capacity "
        "waits drawn independently (default: ordered)",
    )
    parser.add_argument(
        "--runs", type=_positive_int, default=DEFAULT_RUNS, help="simulated runs (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default: %(default)s)")
    parser.add_argument(
        "--waits",
        choices=WAIT_MODELS,
        help="capacity waits in the simulation: the workload's W fixed or exponential, or the trace's "
        "(default: trace with --trace, else fixed)",
    )
    for hook in INPUT_HOOKS:
        hook.add_arguments(parser)
    offers.add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.offers:
        return offers.run(args, Path(args.stacks_dir) if args.stacks_dir else None)
    offers.refuse_offer_options(args)
    loaded = load_workload(args)
    workload = loaded.parse()
    d = placement.decide(
        workload,
        runs=args.runs,
        seed=args.seed,
        trace=args.trace,
        waits=args.waits,
        trace_values=args.trace_values,
        replay=args.replay,
    )
    if args.plot:
        plot(Path(args.plot), d.placement, d.inputs)
    if args.json:
        print(json.dumps(d.document(), indent=2, allow_nan=False))
    else:
        render_report(d.placement, d.simulation, d.inputs, d.warnings, loaded.source, labels=loaded.labels)
        if args.plot:
            print(f"plot written to {args.plot}")
    return EXIT_NONE if d.placement.decision == "none" else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(build_parser().parse_args(argv))
    except PlacementError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
