"""The model server's start-up by phase, per start, as its own log told the agent (the `ready`
event's `server_phases` and `server_log`, spoteval/agent/server_phases.py): where S_boot goes."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Final

from spoteval.agent.server_phases import PHASE_NAMES
from spoteval.report.allocation import Allocation

#: the phases' column headers in the text report (the JSON keeps their names)
LABELS: Final = {
    "model_inspection": "inspect",
    "engine_start": "engine",
    "weight_load": "weights",
    "compile_warmup": "compile+warm",
    "api_start": "api",
}


def headers(allocs: Sequence[Allocation]) -> list[str]:
    """The text table's header: node, #, the phases, total, compile cache."""
    return ["node", "#", *(LABELS.get(c, c) for c in phase_columns(allocs)), "total", "compile cache"]


def phase_columns(allocs: Sequence[Allocation]) -> list[str]:
    """The phases any start reported, in the server's order (unknown names after, sorted)."""
    seen = {name for a in allocs for name in a.server_phases}
    return [n for n in PHASE_NAMES if n in seen] + sorted(seen - set(PHASE_NAMES))


def caches(a: Allocation) -> str:
    """What the log said of the compile cache: `loaded`, `compiled`, or `-`."""
    value = a.server_log.get("compile_cache")
    return value if isinstance(value, str) else "-"


def rows(allocs: Sequence[Allocation], alias: Mapping[str, str], shared: bool) -> list[list[str]]:
    """One row per start that reported phases, then the median of each phase."""
    started = [a for a in allocs if a.server_phases]
    columns = phase_columns(started)
    out: list[list[str]] = []
    for a in started:
        total = sum(a.server_phases.values())
        out.append(
            [
                alias.get(a.node, a.node) if shared else a.node,
                str(a.index),
                *(_s(a.server_phases.get(c)) for c in columns),
                _s(total),
                caches(a),
            ]
        )
    if len(started) > 1:
        medians = [_median([a.server_phases[c] for a in started if c in a.server_phases]) for c in columns]
        median_total = _median([sum(a.server_phases.values()) for a in started])
        out.append(["median", "", *(_s(m) for m in medians), _s(median_total), ""])
    return out


def to_json(a: Allocation) -> dict[str, Any]:
    return {"server_phases": dict(a.server_phases), "server_log": dict(a.server_log)}


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
