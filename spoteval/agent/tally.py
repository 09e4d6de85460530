"""This incarnation's figures for its `stop` event and its log: counts, uptime, cost, the agent's own
CPU and memory, and how long results took to become durable."""

from __future__ import annotations

import resource
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Final

#: completed attempts' durations kept for the estimate of how long an attempt takes
DURATIONS_KEPT: Final = 256


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(
    counts: Mapping[str, int], uptime_s: float, cost: float | None, durable_s: Sequence[float]
) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "counts": dict(counts),
        "uptime_s": round(uptime_s, 3),
        "cost": None if cost is None else round(cost, 6),
        "agent_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "agent_max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "result_durable_s": {
            "n": len(durable_s),
            "p50": percentile(durable_s, 0.5),
            "p99": percentile(durable_s, 0.99),
            "max": max(durable_s) if durable_s else None,
        },
    }
