"""`python -m scripts.placement --offers [--stack NAME ...]`: the options and the one call the script makes.

    --offers                       rank every offer of the stacks' grants, prices read now
    --stack NAME (repeatable)      the stacks whose provider, region, instance type and grant name offers
    --offer-trace P:REGION:TYPE=FILE   a spot trace for one offer (tau and capacity waits), repeatable
    --concurrency-per {node,gpu}   count `concurrency` per node or per GPU (default: the workload's)
    --from-run RUN --store URL     tau and S measured per provider, region and instance type
    --json / --plot FILE.png / --runs N / --seed S   as for the decision

Exit codes: 0 an offer is eligible, 3 none is, 2 bad input (raised as PlacementError).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

from spoteval.offers.build import default_readers, offers_ranking, parse_offer_trace, read_stack
from spoteval.offers.evidence import Measured, OfferKey, from_run
from spoteval.offers.render import plot, text_lines
from spoteval.placement import CONCURRENCY_PER, PlacementError

EXIT_OK, EXIT_NONE = 0, 3


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


def run(args: argparse.Namespace, stacks_dir: Path) -> int:
    """Read the offers' prices, rank them, print the table (or JSON), write the plot; exit code."""
    if getattr(args, "workload", None) is not None:
        raise PlacementError(
            "--offers", "ranks each stack's offers under its own workload block: give --stack"
        )
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
    if args.plot:
        plot(Path(args.plot), ranking)
    if args.json:
        print(json.dumps(ranking.to_json(), indent=2, allow_nan=False))
    else:
        print("\n".join(text_lines(ranking, "stacks " + ", ".join(names))))
        if args.plot:
            print(f"plot written to {args.plot}")
    return EXIT_OK if ranking.best is not None else EXIT_NONE
