"""`--from-run ID --store URL` of `scripts.placement`: the numbers a run record measured, read as the
run report reads them (spoteval.report.next_run: one reading of a run), refine the loaded workload.
It sits in the report, above the placement: the placement never reads a run record itself.

The loaded workload (a file, a stack's block) gives what a record cannot know (prices, deadline,
grant) and what the run did not measure; with neither, the record alone, never the built-in
example. A number the run did not measure and nobody gives is one line naming it.
"""

from __future__ import annotations

import argparse

from spoteval.placement.inputs import LoadedWorkload, check_given
from spoteval.placement.workload import PlacementError
from spoteval.report.load import ReportError
from spoteval.report.next_run import Base, read_next_run
from spoteval.store import Store, StoreError


class FromRun:
    """`--from-run ID --store URL`: the numbers a run record measured replace the loaded workload's,
    read as the run report reads them (spoteval.report.next_run: one reading of a run). The loaded
    workload (a file, a stack's block) gives what a record cannot know (prices, deadline, grant)
    and what the run did not measure; with neither, the record alone, never the built-in example."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("numbers measured in a run record")
        group.add_argument(
            "--from-run",
            metavar="RUN_ID",
            help="use the numbers this run measured (episode lengths, concurrency, tau, W, B, the spot "
            "price); the workload file or --stack gives the rest",
        )
        group.add_argument(
            "--store", metavar="URL", help="the store holding the run record (with --from-run)"
        )

    def apply(self, args: argparse.Namespace, loaded: LoadedWorkload | None) -> LoadedWorkload | None:
        run_id = getattr(args, "from_run", None)
        url = getattr(args, "store", None)
        if not run_id:
            if url:
                raise PlacementError("--store", "is the store of --from-run RUN_ID: give --from-run with it")
            return loaded
        if not url:
            raise PlacementError("--from-run", "needs --store URL, the store that holds the run record")
        if loaded is not None:
            check_given(loaded.raw, loaded.where)
        try:
            nxt = read_next_run(Store(url), run_id, Base.of(loaded))
        except (StoreError, ReportError) as exc:
            raise PlacementError("--from-run", str(exc)) from None
        if nxt.missing:
            given = ", ".join(f"{key} ({why})" for key, why in nxt.missing)
            raise PlacementError(
                "--from-run",
                f"run {run_id} did not measure {given}: give it in a WORKLOAD file or --stack NAME",
            )
        return nxt.loaded()
