"""The run report: lifetimes, restart cost, episodes, cost and efficiency, read from the run record.

Everything here is computed from the record in the store (read through `spoteval.record` and
`spoteval.store`); nothing is kept elsewhere. The steps:

1. `load_run(store, run_id)` reads the manifest, events, attempts and results. Reading is lenient:
   an object that cannot be parsed, or that carries an unknown kind, reason, outcome or field, becomes
   a `Problem` in the report; nothing in the record can make the report fail.
2. `allocations(...)` turns each node's events into allocations, the billed stretches of
   spoteval/billing.py (the model the agent's budget rule and the grant's checks use too): a `start`
   opens one; a `preempted` or `stop` event closes it, as does the node's next `start`. A `notice`
   (other than a rebalance recommendation) marks it preempted. An allocation with neither notice nor
   stop that was followed by another start, or that has been silent for longer than three heartbeat
   intervals, was lost without notice: its end is bounded by its last event (usually a heartbeat).
   Allocations we ended ourselves (`stop`) and allocations still running are censored for the
   lifetime estimate. A `preempted` event seen from outside with `details.launch_time` and no start
   before it is a node taken while booting, before its agent could write anything: an allocation
   from that launch.
3. `analyse(record)` adds tau (exponential MLE with censoring, from `spoteval.placement.lifetime`), S_wait
   (preemption -> next start) and S_boot (start -> ready -> first episode dispatched, plus the
   phases the agent reports in `ready`), from the run's own restarts and from restart measurements,
   episode outcomes, the work interrupted attempts lost, cost (each allocation's logged price x its
   billed interval), and the measured efficiency next to the closed form's prediction for the
   measured D, tau, B and C.
4. `next_run(report, Base(...))` is the placement workload for the next run: the measured numbers,
   and from the base (the user's workload file, or the stack's block under its grant; never the
   built-in example) what the record cannot know, each labelled; `scripts/placement.py --from-run`
   and the drill read a run the same way, so all three give the same decision.

`render(report)` prints the private report; `render(report, shared=True)` and
`report_json(report, shared=True)` carry the method and measurements without instance ids,
addresses, bucket or account names, run or node ids, or absolute prices.

Modules: load.py (1), allocation.py (2), analysis.py (3, with the statistics), next_run.py (4, and
`build`: the report with its next placement), redact.py (the shared view), as_json.py, as_text.py,
plot.py, command.py (what `python -m scripts.report` does).
"""

from __future__ import annotations

from spoteval.report.allocation import (
    ENDINGS,
    UNCENSORED,
    Allocation,
    Gap,
    allocation_of,
    allocations,
    heartbeat_interval,
)
from spoteval.report.analysis import (
    MEASUREMENT_SOURCE,
    Efficiency,
    Episodes,
    RunReport,
    Stat,
    Tau,
    analyse,
    estimate_tau,
    measurement_cycles,
    node_statuses,
    notice_tail_per_preemption,
    predicted_efficiency,
)
from spoteval.report.as_json import (
    origin_of,
    report_json,
)
from spoteval.report.as_text import (
    fmt_s,
    render,
)
from spoteval.report.load import (
    CONFIDENCE,
    DEFAULT_HEARTBEAT_S,
    LOST_AFTER_HEARTBEATS,
    PROBLEM_CATEGORIES,
    Problem,
    ReportError,
    RunRecord,
    load_run,
    parse_record,
)
from spoteval.report.next_run import (
    Base,
    NextRun,
    build,
    decide,
    decide_next,
    measured_workload,
    next_run,
    read_next_run,
    unmeasured,
    with_placement,
    workload_from_run,
)
from spoteval.report.plot import (
    plot_timeline,
)
from spoteval.report.redact import (
    private_strings,
    scrub,
    scrub_json,
)

__all__ = [
    "CONFIDENCE",
    "DEFAULT_HEARTBEAT_S",
    "ENDINGS",
    "LOST_AFTER_HEARTBEATS",
    "MEASUREMENT_SOURCE",
    "PROBLEM_CATEGORIES",
    "UNCENSORED",
    "Allocation",
    "Base",
    "Efficiency",
    "Episodes",
    "Gap",
    "NextRun",
    "Problem",
    "ReportError",
    "RunRecord",
    "RunReport",
    "Stat",
    "Tau",
    "allocation_of",
    "allocations",
    "analyse",
    "build",
    "decide",
    "decide_next",
    "estimate_tau",
    "fmt_s",
    "heartbeat_interval",
    "load_run",
    "measured_workload",
    "measurement_cycles",
    "next_run",
    "node_statuses",
    "notice_tail_per_preemption",
    "origin_of",
    "parse_record",
    "plot_timeline",
    "predicted_efficiency",
    "private_strings",
    "read_next_run",
    "render",
    "report_json",
    "scrub",
    "scrub_json",
    "unmeasured",
    "with_placement",
    "workload_from_run",
]
