"""The deadline rule in the operator: the spot policy's answer (spoteval.placement.live) from the run
record, on every check; said on the status line while it asks for a switch, with the command that
flips the stack; written to the operator's journal once per change of answer. The operator never
flips the stack itself: moving a stack to another market replaces its node (`pulumi up`).

The journal note: `what: deadline`, `reason`: `switch_to_on_demand` or `back_to_spot`, `message`:
the status line, `details`: `policy`, `market` (the stack's now), `work_left_hours`,
`hours_to_deadline`, `command`. A note is written when the answer asks for a switch and the
journal's last deadline note does not already say the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from spoteval.node_status import SERVING, NodeStatus, record_node
from spoteval.operate.journal import Journal, Note, RunView
from spoteval.placement.live import MARKET_OF, Advice, RunNow, advise, flip_command
from spoteval.placement.workload import Workload

NOTE: str = "deadline"


@dataclass(frozen=True)
class DeadlineWatch:
    """What the rule needs beside the record: the stack's workload, the policy, the stack's name."""

    workload: Workload
    policy: str
    stack: str | None  # for the command (None: outputs given as a file)

    def command(self, advice: Advice) -> str | None:
        market = MARKET_OF.get(advice.action)
        return flip_command(self.stack, market) if market else None


def run_now(run: RunView, statuses: Iterable[NodeStatus], market: str, now: datetime) -> RunNow | None:
    """The run as the rule sees it; None before its first start or without a manifest."""
    starts = [e.time for e in run.events if e.kind == "start"]
    if not starts or run.episodes is None or run.missing is None:
        return None
    return RunNow(
        elapsed_hours=(now - min(starts)).total_seconds() / 3600.0,
        episodes=run.episodes,
        missing=run.missing,
        holding_spot=market == "spot" and any(s.status == SERVING for s in statuses),
        market=market,
    )


def check(
    watch: DeadlineWatch,
    run: RunView,
    statuses: Iterable[NodeStatus],
    *,
    market: str,
    now: datetime,
    check_hours: float,
) -> Advice | None:
    state = run_now(run, statuses, market, now)
    if state is None:
        return None
    return advise(watch.workload, watch.policy, state, check_hours=check_hours)


def record_once(journal: Journal, run: RunView, watch: DeadlineWatch, advice: Advice, now: datetime) -> bool:
    """Write the switch `advice` asks for to the journal unless its last deadline note says the same."""
    if not advice.fires:
        return False
    notes = [n for n in run.notes if n.what == NOTE]
    if notes and max(notes, key=lambda n: n.time).reason == advice.action:
        return False
    node = record_node(journal.outputs.node_ids[0]) if journal.outputs.node_ids else journal.outputs.run_id
    journal.note(
        Note(
            now,
            node,
            NOTE,
            advice.action,
            advice.text(watch.command(advice)),
            {**advice.to_json(), "command": watch.command(advice)},
        )
    )
    return True
