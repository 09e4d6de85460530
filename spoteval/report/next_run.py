"""The placement workload for the next run, from the numbers a run measured, and its decision."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from spoteval import placement
from spoteval.report.allocation import Allocation
from spoteval.report.analysis import RunReport, analyse
from spoteval.report.deadline import with_deadline
from spoteval.report.load import load_run
from spoteval.store import Store

# --- the workload for the next run --------------------------------------------------------------


def workload_from_run(report: RunReport, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The placement workload (see spoteval.placement) with the numbers this run measured.

    Measured: episode length samples (minutes), concurrency, tau and its interval (hours), capacity
    wait W and restart overhead B (minutes: S_boot plus the billed notice tail per preemption, the
    time from a notice to the end of the allocation in which no new episode starts), the spot price
    (time-weighted mean of the logged spot prices), and the episode count (the manifest's).
    Everything the record cannot know (other options' prices, deadline, margin, grant) comes from
    `base`. With no preemption tau has no point estimate: the interval's lower bound is used, which
    favours the non-preemptible options (the cautious side).

    A run of harness shards (spoteval/harness/) resumes a shard from its finished samples, so its
    unit of work is the sample: D_i is each sample's model time plus its share of its shard's
    harness start-up (start-up / samples in the shard, counted once per shard), the episode count
    is the number of samples, and B gains the mean start-up (a restarted shard pays it again).
    """
    out: dict[str, Any] = json.loads(json.dumps(dict(base or {})))
    ep = report.episodes
    if ep.manifest:
        out["episodes"] = ep.manifest
    elif ep.durations_s:
        out["episodes"] = len({a.episode_id for a in report.record.attempts})
    if ep.durations_s:
        out.pop("episode_minutes", None)
        out["episode_minutes_samples"] = [round(d / 60.0, 6) for d in ep.durations_s]
    harness = harness_timing(report)
    if harness is not None:
        out["episodes"], out["episode_minutes_samples"], startup_s = harness
    if ep.concurrency:
        out["concurrency"] = ep.concurrency
    if report.tau is not None:
        tau_s = report.tau.seconds if report.tau.seconds is not None else report.tau.low_s
        if tau_s > 0:
            out["lifetime_hours"] = tau_s / 3600.0
            if report.tau.high_s is not None and report.tau.low_s > 0:
                out["lifetime_interval_hours"] = [report.tau.low_s / 3600.0, report.tau.high_s / 3600.0]
            else:
                out.pop("lifetime_interval_hours", None)
    restart = dict(out.get("restart") or {})
    if report.wait is not None:
        restart["wait_minutes"] = report.wait.mean / 60.0
    elif report.measured_wait is not None:
        restart["wait_minutes"] = report.measured_wait.mean / 60.0
    if report.boot is not None:
        restart["boot_minutes"] = (report.boot.mean + report.efficiency.notice_tail_s) / 60.0
    elif report.measured_boot is not None:
        restart["boot_minutes"] = report.measured_boot.mean / 60.0
    if harness is not None and "boot_minutes" in restart:
        restart["boot_minutes"] += startup_s / 60.0
    if restart:
        out["restart"] = restart
    spot = _mean_price(report.allocations, "spot")
    if spot is not None:
        prices = dict(out.get("prices") or {})
        prices["spot"] = spot
        out["prices"] = prices
    return out


def harness_timing(report: RunReport) -> tuple[int, list[float], float] | None:
    """(samples, D_i in minutes per sample, mean start-up seconds) of a run's harness shards, or None."""
    samples: list[float] = []
    startups: list[float] = []
    for result in report.record.results.values():
        out = result.output
        if result.outcome != "completed" or not isinstance(out, Mapping) or "harness" not in out:
            continue
        rows = [s for s in out.get("samples") or [] if isinstance(s, Mapping)]
        startup = out.get("startup_s")
        startup = float(startup) if isinstance(startup, int | float) else 0.0
        startups.append(startup)
        for row in rows:
            model_s = row.get("model_s")
            seconds = float(model_s) if isinstance(model_s, int | float) else 0.0
            samples.append(round((seconds + startup / len(rows)) / 60.0, 6))
    if not samples:
        return None
    total = sum(len(e.params.get("samples") or []) for e in report.record.manifest or ())
    return total or len(samples), samples, sum(startups) / len(startups)


def unmeasured(report: RunReport) -> list[str]:
    """Placement inputs this run could not measure (they must come from the base workload)."""
    out: list[str] = []
    if not report.episodes.durations_s:
        out.append("episode_minutes (no finished attempt)")
    if not report.episodes.concurrency:
        out.append("concurrency (no attempt)")
    if report.tau is None:
        out.append("lifetime_hours (no allocation)")
    elif report.tau.seconds is None:
        out.append("lifetime_hours (no preemption: the interval's lower bound is used)")
    if report.wait is None and report.measured_wait is None:
        out.append("restart.wait_minutes (no restart after a preemption)")
    if report.boot is None and report.measured_boot is None:
        out.append("restart.boot_minutes (no node reached its first episode)")
    if _mean_price(report.allocations, "spot") is None:
        out.append("prices.spot (no spot price logged)")
    return out


def _mean_price(allocs: Iterable[Allocation], market: str) -> float | None:
    cost = hours = 0.0
    for a in allocs:
        c = a.cost
        if a.market == market and c is not None and a.seconds > 0:
            cost += c
            hours += a.seconds / 3600.0
    if hours > 0:
        return cost / hours
    prices = [a.price for a in allocs if a.market == market and a.price is not None]
    return statistics.fmean(prices) if prices else None


def with_placement(
    report: RunReport, decide: Callable[[Mapping[str, Any]], Mapping[str, Any]], workload: Mapping[str, Any]
) -> RunReport:
    """The report with the placement decision for `workload` (the output of `decide`) attached."""
    try:
        result = dict(decide(workload))
        note = ""
    except Exception as exc:  # the decision is one section of the report, never its failure
        result, note = {}, f"no placement decision: {exc}"
    return replace(report, placement=result or None, placement_note=note)


def decide(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The placement decision for a workload mapping, as `python -m scripts.placement --json` prints it:
    the same closed form, the same Monte-Carlo (default runs and seed) for spot's deadline chance."""
    return placement.decide(placement.parse_workload(raw)).document()


def measured_workload(store: Store, run_id: str, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """`workload_from_run` of the run `run_id` in `store` (what `placement --from-run` reads)."""
    return workload_from_run(analyse(load_run(store, run_id)), base)


def build(
    store: Store,
    run_id: str,
    base: Mapping[str, Any] | None,
    base_source: str,
    *,
    deadline_of: Mapping[str, Any] | None = None,
    stack: str | None = None,
) -> RunReport:
    """Load, analyse, and attach the placement decision for the next run, and, with `deadline_of`
    (the user's workload), what its spot policy says about the deadline now."""
    rep = analyse(load_run(store, run_id))
    if deadline_of is not None:
        rep = with_deadline(rep, deadline_of, stack)
    workload = workload_from_run(rep, base)
    rep = with_placement(rep, decide, workload)
    missing = unmeasured(rep)
    if rep.placement is not None:
        note = base_source
        if missing:
            note += "; not measured in this run, so from there too: " + ", ".join(missing)
        rep = replace(rep, placement_note=note)
    elif missing:
        given = ", ".join(missing)
        note = f"{rep.placement_note}; not measured in this run: {given}: give them in --workload FILE"
        rep = replace(rep, placement_note=note)
    return rep
