"""Stop rules as a pure decision: `should_stop(state, rules) -> Stop | None`; and after a notice,
which attempts run on (`finish_by`, `runs_on`).

The agent's loop builds a `RunState` snapshot on every tick and asks; nothing here reads a clock,
a file or the store, so every rule is tested with plain values.

- `done`: no episode is left without a final outcome and nothing is running.
- `stop_rule:budget`: price x uptime of the run so far (all incarnations, from the record, plus
  this one) reached `budget`. Needs a known price; without one the rule cannot fire.
- `stop_rule:max_runtime`: the run's node uptime so far (all incarnations) reached `max_runtime_s`.
- `stop_rule:idle`: nothing running and nothing dispatchable for `idle_s`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spoteval.agent.config import StopRules


@dataclass(frozen=True)
class RunState:
    remaining: int  # episodes without a final outcome (running, waiting, or settling)
    running: int  # attempts in flight now
    uptime_s: float  # node uptime of the run: previous incarnations from the record + this one
    cost: float | None  # money spent so far (None when the price is unknown)
    idle_s: float  # seconds with nothing running and nothing dispatchable (0 while busy)


@dataclass(frozen=True)
class Stop:
    reason: str  # a stop reason of the record's closed list
    details: Mapping[str, Any] = field(default_factory=dict)


def should_stop(state: RunState, rules: StopRules) -> Stop | None:
    """The stop that applies now, or None. Order: done, budget, max_runtime, idle."""
    if state.remaining == 0 and state.running == 0:
        return Stop("done")
    if rules.budget is not None and state.cost is not None and state.cost >= rules.budget:
        return Stop(
            "stop_rule:budget",
            {"budget": rules.budget, "spent": round(state.cost, 6), "remaining": state.remaining},
        )
    if rules.max_runtime_s is not None and state.uptime_s >= rules.max_runtime_s:
        return Stop(
            "stop_rule:max_runtime",
            {
                "max_runtime_s": rules.max_runtime_s,
                "uptime_s": round(state.uptime_s, 3),
                "remaining": state.remaining,
            },
        )
    if rules.idle_s is not None and state.running == 0 and state.idle_s >= rules.idle_s:
        return Stop(
            "stop_rule:idle",
            {"idle_s": rules.idle_s, "idle_for_s": round(state.idle_s, 3), "remaining": state.remaining},
        )
    return None


def finish_by(notice_mono: float, deadline_mono: float) -> float:
    """After a notice: when attempts that run on must have ended (a margin before the deadline:
    a quarter of the window, at least 1 s, at most 15 s)."""
    window = max(0.0, deadline_mono - notice_mono)
    margin = min(15.0, max(1.0, 0.25 * window))
    return deadline_mono - margin


def runs_on(started_mono: float, estimate_s: float | None, finish_by_mono: float) -> bool:
    """Whether an attempt in flight at a notice runs on: only if it should end (the median duration
    of completed attempts) by `finish_by_mono`."""
    return estimate_s is not None and started_mono + estimate_s <= finish_by_mono
