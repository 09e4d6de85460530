"""Stop rules as a pure decision: `should_stop(state, rules) -> Stop | None`; and after a notice,
which attempts run on (`finish_by`, `runs_on`).

The agent's loop builds a `RunState` snapshot on every tick and asks; nothing here reads a clock,
a file or the store, so every rule is tested with plain values.

- `done`: no episode is left without a final outcome and nothing is running.
- `stop_rule:price_cap`: the price in force (re-read while running) is above the grant's hourly
  `price_cap`. Needs a known price; without one the rule cannot fire.
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
from spoteval.grant import above_price_cap


@dataclass(frozen=True)
class RunState:
    remaining: int  # episodes without a final outcome (running, waiting, or settling)
    running: int  # attempts in flight now
    uptime_s: float  # node uptime of the run: previous incarnations from the record + this one
    cost: float | None  # money spent so far (None when the price is unknown)
    idle_s: float  # seconds with nothing running and nothing dispatchable (0 while busy)
    price_per_hour: float | None = None  # the price in force now (None when unknown)
    own_cost: float | None = None  # in a pool: this node's own part of `cost` (None: cost is its own)


@dataclass(frozen=True)
class Stop:
    reason: str  # a stop reason of the record's closed list
    details: Mapping[str, Any] = field(default_factory=dict)


def should_stop(state: RunState, rules: StopRules) -> Stop | None:
    """The stop that applies now, or None. Order: done, price_cap, budget, max_runtime, idle."""
    if state.remaining == 0 and state.running == 0:
        return Stop("done")
    price = state.price_per_hour
    if price is not None and above_price_cap(price, rules.price_cap):
        return Stop(
            "stop_rule:price_cap",
            {"price_cap": rules.price_cap, "price_per_hour": price, "remaining": state.remaining},
        )
    if rules.budget is not None and state.cost is not None and state.cost >= rules.budget:
        details: dict[str, Any] = {"budget": rules.budget, "spent": round(state.cost, 6)}
        if state.own_cost is not None:
            details["own"] = round(state.own_cost, 6)
        return Stop("stop_rule:budget", {**details, "remaining": state.remaining})
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


def term_grace_s(window_s: float) -> float:
    """After a notice of `window_s` seconds: SIGTERM -> SIGKILL for an attempt cut short (a tenth of
    the window, 0.5 to 10 s), time for a harness to save its state."""
    return min(10.0, max(0.5, 0.1 * window_s))


def shutdown_margin_s(window_s: float) -> float:
    """Time kept before a notice's deadline for the flush and the model server's stop (30 % of the
    window, 2 to 15 s)."""
    return min(15.0, max(2.0, 0.3 * window_s))


def finish_by(notice_mono: float, deadline_mono: float) -> float:
    """After a notice: when attempts that run on get SIGTERM, so that their grace, the flush and the
    model server's stop still fit before the deadline."""
    window = max(0.0, deadline_mono - notice_mono)
    return deadline_mono - shutdown_margin_s(window) - term_grace_s(window)


def outage_backlog(concurrency: int) -> int:
    """Objects allowed to wait in the spool while the store does not answer; beyond it dispatch
    pauses, so the spool (and each heartbeat's in-flight list) stays bounded through an outage."""
    return max(256, 16 * concurrency)


def runs_on(started_mono: float, estimate_s: float | None, finish_by_mono: float) -> bool:
    """Whether an attempt in flight at a notice runs on: only if it should end (the median duration
    of completed attempts) by `finish_by_mono`."""
    return estimate_s is not None and started_mono + estimate_s <= finish_by_mono
