"""The deadline in the run report: what the stack's spot policy says now, computed from the record as
the operator computes it (spoteval.placement.live), or, once the run is done, whether it met the
deadline. Only with a deadline from the user's workload (`--workload FILE` or the stack's block),
never the built-in example's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from spoteval.figures import hours
from spoteval.node_status import SERVING
from spoteval.placement.live import MARKET_OF, Advice, RunNow, advise, flip_command, live_policy
from spoteval.placement.workload import PlacementError, parse_workload
from spoteval.report.analysis import RunReport, node_statuses

#: how often the rule is taken to be checked (the operator's default interval)
CHECK_HOURS = 60.0 / 3600.0


@dataclass(frozen=True)
class DeadlineView:
    policy: str
    deadline_hours: float
    elapsed_hours: float  # from the first start to the report (or to the last result, once done)
    advice: Advice | None  # None once the run is done
    finished: bool
    command: str | None  # the flip the advice asks for, with the stack's name when known

    @property
    def met(self) -> bool | None:
        return self.elapsed_hours <= self.deadline_hours if self.finished else None

    def lines(self, *, shared: bool) -> list[str]:
        head = f"Deadline {hours(self.deadline_hours)} from the first start (spot policy {self.policy}):"
        if self.finished:
            verdict = "met" if self.met else "missed"
            return [
                f"{head} {verdict}: the last result came {hours(self.elapsed_hours)} after the first start"
            ]
        assert self.advice is not None
        return [head, f"  {self.advice.text(None if shared else self.command)}"]

    def to_json(self, *, shared: bool) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "deadline_hours": self.deadline_hours,
            "elapsed_hours": self.elapsed_hours,
            "finished": self.finished,
            "met": self.met,
            "advice": self.advice.to_json() if self.advice else None,
            "command": None if shared else self.command,
        }


def deadline_view(
    report: RunReport, raw: Mapping[str, Any], stack: str | None
) -> tuple[DeadlineView | None, str]:
    """The deadline section for the workload `raw`, and a note when it cannot be given."""
    if raw.get("deadline_hours") is None:
        return None, ""
    try:
        workload = parse_workload(raw)
        policy = live_policy(workload)
    except PlacementError as exc:
        return None, f"no deadline rule: {exc}"
    starts = [e for e in report.record.events if e.kind == "start"]
    ep = report.episodes
    if policy is None or workload.deadline_hours is None or not starts or not ep.manifest:
        return None, "no deadline rule yet: the run has no start or no manifest"
    first = min(e.time for e in starts)
    market = max(starts, key=lambda e: e.time).market or "spot"
    results = list(report.record.results.values())
    finished = ep.pending == 0 and bool(results)
    end = max(r.ended for r in results) if finished else report.generated
    elapsed = (end - first).total_seconds() / 3600.0
    advice = None
    if not finished:
        serving = any(s.status == SERVING for s in node_statuses(report))
        now = RunNow(elapsed, ep.manifest, ep.pending or 0, serving and market == "spot", market)
        advice = advise(workload, policy, now, check_hours=CHECK_HOURS)
    target = MARKET_OF.get(advice.action) if advice else None
    command = flip_command(stack, target) if target else None
    view = DeadlineView(policy, workload.deadline_hours, elapsed, advice, finished or advice is None, command)
    return view, ""


def with_deadline(report: RunReport, raw: Mapping[str, Any], stack: str | None) -> RunReport:
    view, note = deadline_view(report, raw, stack)
    return replace(report, deadline=view, deadline_note=note)
