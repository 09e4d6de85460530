"""The report as JSON (`report_json`), private or shared."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from spoteval.record import (
    format_time,
)
from spoteval.report.allocation import Allocation, allocation_of
from spoteval.report.analysis import RunReport, Stat, node_statuses
from spoteval.report.failures import harness_failures
from spoteval.report.pool import to_json as pool_json
from spoteval.report.redact import _aliases, _shared_problems, private_strings, scrub_json
from spoteval.scores import as_json as scores_json

# --- JSON ---------------------------------------------------------------------------------------


def _t(t: datetime | None, origin: datetime, shared: bool) -> Any:
    if t is None:
        return None
    return round((t - origin).total_seconds(), 3) if shared else format_time(t)


def origin_of(report: RunReport) -> datetime:
    times = [a.start for a in report.allocations] + [e.time for e in report.record.events]
    return min(times) if times else report.generated


def _allocation_json(
    a: Allocation, alias: Mapping[str, str], origin: datetime, shared: bool
) -> dict[str, Any]:
    """One allocation: when and why it started and ended, what it ran on, and (not shared) its price."""
    item: dict[str, Any] = {
        "node": alias[a.node] if shared else a.node,
        "index": a.index,
        "kind": a.kind,
        "start": _t(a.start, origin, shared),
        "end": _t(a.end, origin, shared),
        "seconds": round(a.seconds, 3),
        "start_reason": a.start_reason,
        "ended_by": a.ended_by,
        "end_reason": a.end_reason,
        "censored": a.censored,
        "notice": _t(a.notice, origin, shared),
        "ready": _t(a.ready, origin, shared),
        "first_dispatch": _t(a.first_dispatch, origin, shared),
        "boot_s": a.boot_s,
        "provider": a.provider,
        "region": a.region,
        "instance_type": a.instance_type,
        "market": a.market,
    }
    if not shared:
        item.update(
            {
                "zone": a.zone,
                "price_per_hour": a.price,
                "prices": [[format_time(t), p] for t, p in a.prices],
                "currency": a.currency,
                "price_source": a.price_source,
                "cost": a.cost,
                "identifiers": sorted(a.identifiers - {a.node}),
            }
        )
    return item


def _nodes_json(report: RunReport, alias: Mapping[str, str], origin: datetime, shared: bool) -> list[Any]:
    """Each node's status now, as the operator reads the record."""
    return [
        {
            "node": alias[st.node] if shared else st.node,
            "status": st.status,
            "label": st.label,
            "reason": st.reason,
            "since": _t(st.since, origin, shared) if st.since else None,
        }
        for st in node_statuses(report)
    ]


def _preemptions_json(report: RunReport) -> dict[str, Any] | None:
    """How the preemptions were seen: by the agent, the provider, or both."""
    p = report.preemptions
    if p is None:
        return None
    return {
        "total": p.total,
        "both": p.both,
        "agent_only": p.agent_only,
        "provider_only": p.provider_only,
        "provider_stops": p.provider_stops,
        "repeated_stops": p.repeated_stops,
    }


def _restart_json(report: RunReport) -> dict[str, Any]:
    """The restart cost S: the run's waits and boots, their phases, and a measure_restart's."""
    return {
        "wait": report.wait.to_json() if report.wait else None,
        "boot": report.boot.to_json() if report.boot else None,
        "notice_tail": _stat_json(report.notice_tail),
        "boot_phases": {k: v.to_json() for k, v in report.boot_phases.items()},
        "measurement": {
            "wait": report.measured_wait.to_json() if report.measured_wait else None,
            "boot": report.measured_boot.to_json() if report.measured_boot else None,
            "phases": {k: v.to_json() for k, v in report.measured_phases.items()},
        },
    }


def _episodes_json(report: RunReport) -> dict[str, Any]:
    """The episodes: done, failed, pending, the attempts and the time the interruptions lost."""
    ep = report.episodes
    return {
        "manifest": ep.manifest,
        "completed": ep.completed,
        "model_failures": ep.model_failures,
        "pending": ep.pending,
        "attempts": dict(ep.attempts),
        "interrupted_episode_seconds": round(ep.interrupted_lost_s, 3),
        "interrupted_node_hours": ep.lost_node_hours,
        "concurrency": ep.concurrency,
        "concurrency_source": ep.concurrency_source,
        "episode_seconds": _stat_json(Stat.of(ep.durations_s)),
    }


def _efficiency_json(report: RunReport) -> dict[str, Any]:
    """Useful over billed node time, measured and as the closed form predicts it, with its inputs."""
    eff = report.efficiency
    return {
        "measured": eff.measured,
        "predicted": eff.predicted,
        "useful_node_hours": eff.useful_node_hours,
        "billed_node_hours": eff.billed_node_hours,
        "inputs": {
            "episodes": eff.episodes,
            "mean_episode_s": eff.mean_episode_s,
            "tau_s": eff.tau_s,
            "boot_s": eff.boot_s,
            "notice_tail_s": eff.notice_tail_s,
            "restart_overhead_s": eff.restart_overhead_s,
            "wait_s": eff.wait_s,
            "concurrency": eff.concurrency,
        },
        "note": eff.note,
    }


def _harness_errors_json(report: RunReport, shared: bool) -> dict[str, Any]:
    """The episodes that failed for a reason that is not the model's (the first ones, not shared)."""
    failures = harness_failures(report.record.results, report.episodes.manifest)
    return {
        "count": failures.count,
        "every_episode": failures.every_episode,
        "first": [] if shared else [{"episode": e, "reason": r} for e, r in failures.first],
    }


def report_json(report: RunReport, *, shared: bool = False) -> dict[str, Any]:
    """The report as one JSON object. `shared` drops every identifier and absolute price."""
    origin = origin_of(report)
    alias = _aliases(report)
    out: dict[str, Any] = {
        "shared": shared,
        "generated": None if shared else format_time(report.generated),
        "allocations": [_allocation_json(a, alias, origin, shared) for a in report.allocations],
        "nodes": _nodes_json(report, alias, origin, shared),
        "tau": report.tau.to_json() if report.tau else None,
        "preemptions": _preemptions_json(report),
        "restart": _restart_json(report),
        "episodes": _episodes_json(report),
        "efficiency": _efficiency_json(report),
        "scores": scores_json(report.scores),
        "harness_errors": _harness_errors_json(report, shared),
        "deadline": report.deadline.to_json(shared=shared) if report.deadline is not None else None,
        "pool": None if report.pool is None else pool_json(report.pool, alias if shared else None),
    }
    if shared:
        out["problems"] = _shared_problems(report.problems)
        out["cost"] = _shared_cost(report)
        out["placement"] = _shared_placement(report.placement)
        # the last net, as for the text: strings taken from the record (unknown reasons, phase
        # names) may still carry an identifier
        scrubbed: dict[str, Any] = scrub_json(out, private_strings(report))
        return scrubbed
    out["run_id"] = report.record.run_id
    out["store"] = report.record.store_url
    out["cost"] = {"by_currency": dict(report.cost), "unpriced_allocations": report.unpriced}
    out["lost_cost"] = _lost_cost(report)
    out["problems"] = [p.__dict__ for p in report.problems]
    out["placement"] = dict(report.placement) if report.placement else None
    out["placement_note"] = report.placement_note
    return out


def _stat_json(stat: Stat | None) -> dict[str, float] | None:
    return stat.to_json() if stat is not None else None


def _lost_cost(report: RunReport) -> dict[str, float]:
    """What the interrupted attempts' share of their node cost: price x episode time / concurrency."""
    c = report.episodes.concurrency
    out: dict[str, float] = defaultdict(float)
    if not c:
        return {}
    for a in report.record.attempts:
        if a.outcome != "interrupted":
            continue
        alloc = allocation_of(report.allocations, a.node, a.started)
        price = alloc.price_at(a.started) if alloc else None
        if alloc is None or price is None:
            continue
        end = min(a.ended, alloc.end)
        out[alloc.currency or "?"] += price * max(0.0, (end - a.started).total_seconds()) / 3600.0 / c
    return dict(out)


def _shared_cost(report: RunReport) -> dict[str, Any]:
    """Ratios only: the lost share of spend, and spot cost per useful node-hour vs its own price."""
    total = sum(report.cost.values())
    lost = sum(_lost_cost(report).values())
    eff = report.efficiency
    return {
        "lost_share": (lost / total) if total > 0 else None,
        "cost_per_useful_node_hour_over_price": (1.0 / eff.measured) if eff.measured else None,
        "unpriced_allocations": report.unpriced,
    }


def _shared_placement(placement: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not placement:
        return None
    options = placement.get("options") or {}
    costs = {k: v.get("expected_cost") for k, v in options.items() if isinstance(v, Mapping)}
    finite = [c for c in costs.values() if isinstance(c, int | float) and c > 0]
    cheapest = min(finite) if finite else None
    shared_options: dict[str, Any] = {}
    for name, opt in options.items():
        if not isinstance(opt, Mapping):
            continue
        cost = opt.get("expected_cost")
        shared_options[name] = {
            "cost_over_cheapest": (cost / cheapest) if cheapest and isinstance(cost, int | float) else None,
            "wall_hours": opt.get("wall_hours"),
            "efficiency": opt.get("efficiency"),
            "p_deadline": opt.get("p_deadline"),
            "eligible": opt.get("eligible"),
        }
    ratio = (placement.get("break_even") or {}).get("price_ratio")
    return {
        "decision": placement.get("decision"),
        "options": shared_options,
        "break_even": {
            "tau_hours": (placement.get("break_even") or {}).get("tau_hours"),
            "price_ratio": ratio,
        },
    }
