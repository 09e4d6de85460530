"""`python -m scripts.placement --offers [--stack NAME ...]`: the options and the one call the script makes.

    --offers                       rank every offer of the stacks' grants, prices read now
    --stack NAME (repeatable)      the stacks whose provider, region, instance type and grant name offers
    --offer-trace P:REGION:TYPE=FILE   a spot trace for one offer (tau and capacity waits), repeatable
    --concurrency-per {node,gpu}   count `concurrency` per node or per GPU (default: the workload's)
    --from-run RUN --store URL     tau and S measured per provider, region and instance type
    --json / --plot FILE.png / --runs N / --seed S   as for the decision

Exit codes: 0 an offer is eligible, 3 offers were priced but none fits the grant, 4 nothing could be
priced (no price API answered for any offer: the reasons say which API and what to fix), 2 bad
input (raised as PlacementError). `--offer-trace` and `--concurrency-per` without `--offers`, and
`--trace`, `--waits` or a WORKLOAD file with it, are bad input: each applies to one of the two.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from spoteval.offers.build import default_readers, offers_ranking, parse_offer_trace, read_stack
from spoteval.offers.evidence import Measured, OfferKey, from_run
from spoteval.offers.render import plot, text_lines
from spoteval.placement import CONCURRENCY_PER, PlacementError

EXIT_OK, EXIT_NONE, EXIT_UNPRICED = 0, 3, 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("offers: where and on what, right now (--offers)")
    group.add_argument(
        "--offers",
        action="store_true",
        help="rank every offer the stacks' grants allow by the decision's figures, prices read now",
    )
    group.add_argument(
        "--offer-trace",
        action="append",
        default=[],
        metavar="PROVIDER:REGION:TYPE=FILE",
        help="a spot trace for one offer: its tau and capacity waits (repeatable)",
    )
    group.add_argument(
        "--concurrency-per",
        choices=CONCURRENCY_PER,
        help="count the workload's concurrency per node or per GPU for every offer "
        "(default: the workload's concurrency_per, node when it has none)",
    )


def refuse_offer_options(args: argparse.Namespace) -> None:
    """Without --offers: the options that only rank offers are bad input, not silently ignored."""
    if getattr(args, "offer_trace", None):
        raise PlacementError(
            "--offer-trace", "traces one offer of --offers: give --offers with it (or --trace FILE)"
        )
    if getattr(args, "concurrency_per", None) is not None:
        raise PlacementError(
            "--concurrency-per",
            "applies to the offers' instance types: give --offers with it "
            "(or concurrency_per in the workload)",
        )


def _refuse_decision_options(args: argparse.Namespace) -> None:
    """With --offers: the decision's own options are bad input, each with the option that applies."""
    if getattr(args, "workload", None) is not None:
        raise PlacementError(
            "--offers", "ranks each stack's offers under its own workload block: give --stack"
        )
    if getattr(args, "trace", None):
        raise PlacementError(
            "--trace", "with --offers a trace belongs to one offer: --offer-trace PROVIDER:REGION:TYPE=FILE"
        )
    if getattr(args, "waits", None):
        raise PlacementError(
            "--waits", "with --offers the waits come from each offer's evidence (run, trace, workload)"
        )


def _measured_run(args: argparse.Namespace) -> Mapping[OfferKey, Measured] | None:
    run_id = getattr(args, "from_run", None)
    if not run_id:
        return None
    url = getattr(args, "store", None)
    if not url:
        raise PlacementError("--from-run", "needs --store URL, the store that holds the run record")
    from spoteval import report
    from spoteval.store import Store, StoreError

    try:
        return from_run(report.load_run(Store(url), run_id))
    except (StoreError, report.ReportError) as exc:
        raise PlacementError("--from-run", str(exc)) from None


def run(args: argparse.Namespace, stacks_dir: Path | None) -> int:
    """Read the offers' prices, rank them, print the table (or JSON), write the plot; exit code."""
    _refuse_decision_options(args)
    names = args.stack or []
    if isinstance(names, str):
        names = [names]
    stacks = [read_stack(name, stacks_dir) for name in names]
    ranking = offers_ranking(
        stacks,
        None,
        readers=default_readers(stacks),
        traces=[parse_offer_trace(t) for t in args.offer_trace],
        run=_measured_run(args),
        concurrency_per=args.concurrency_per,
        runs=args.runs,
        seed=args.seed,
    )
    unpriced = ranking.priced == 0
    if args.plot and not unpriced:
        plot(Path(args.plot), ranking)
    if args.json:
        print(json.dumps(ranking.to_json(), indent=2, allow_nan=False))
    else:
        print("\n".join(text_lines(ranking, "stacks " + ", ".join(names))))
        if args.plot and not unpriced:
            print(f"plot written to {args.plot}")
    if args.plot and unpriced:
        print(f"placement: --plot {args.plot}: not written: no offer has a price to plot", file=sys.stderr)
    if unpriced:
        return EXIT_UNPRICED
    return EXIT_OK if ranking.best is not None else EXIT_NONE
