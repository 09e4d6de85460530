"""The placement workload for the next run, from the numbers a run measured, and its decision.

One reading of a run: the drill's summary, `scripts.report` and `scripts.placement --from-run` all
call `next_run` on the same record and the same base, so they give the same decision. What the record
cannot know (the other options' prices, the deadline, the margin, the grant) and what this run did
not measure comes from the base: the user's workload file, or the stack's `spot-eval:workload`
block under the stack's grant. Never from the built-in example: with no base, the decision is made
from the record alone (only spot is priced) or, when the record lacks a number the decision needs,
not made, with the reason. Every input is labelled with where it came from; with no preemption
observed, tau is the interval's lower bound and says so.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spoteval import placement
from spoteval.figures import seconds
from spoteval.grant import Grant
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
    `base`. With no preemption tau has no point estimate: the base's `lifetime_hours` is kept when
    it gives one, else the interval's lower bound is used, which favours the non-preemptible
    options (the cautious side).

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
    tau = report.tau
    if tau is not None and (tau.seconds is not None or "lifetime_hours" not in out):
        tau_s = tau.seconds if tau.seconds is not None else tau.low_s
        if tau_s > 0:
            out["lifetime_hours"] = tau_s / 3600.0
            if tau.high_s is not None and tau.low_s > 0:
                out["lifetime_interval_hours"] = [tau.low_s / 3600.0, tau.high_s / 3600.0]
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
            secs = float(model_s) if isinstance(model_s, int | float) else 0.0
            samples.append(round((secs + startup / len(rows)) / 60.0, 6))
    if not samples:
        return None
    total = sum(len(e.params.get("samples") or []) for e in report.record.manifest or ())
    return total or len(samples), samples, sum(startups) / len(startups)


def unmeasured_keys(report: RunReport) -> list[tuple[str, str]]:
    """(workload key, why) for each placement input this run could not measure."""
    out: list[tuple[str, str]] = []
    if not report.episodes.durations_s:
        out.append(("episode_minutes", "no finished attempt"))
    if not report.episodes.concurrency:
        out.append(("concurrency", "no attempt"))
    if report.tau is None:
        out.append(("lifetime_hours", "no allocation"))
    elif report.tau.seconds is None:
        out.append(("lifetime_hours", "no preemption: only a lower bound"))
    if report.wait is None and report.measured_wait is None:
        out.append(("restart.wait_minutes", "no restart after a preemption"))
    if report.boot is None and report.measured_boot is None:
        out.append(("restart.boot_minutes", "no node reached its first episode"))
    if _mean_price(report.allocations, "spot") is None:
        out.append(("prices.spot", "no spot price logged"))
    return out


def unmeasured(report: RunReport) -> list[str]:
    """Placement inputs this run could not measure (they must come from the base workload)."""
    return [f"{key} ({why})" for key, why in unmeasured_keys(report)]


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


def _has(raw: Mapping[str, Any], key: str) -> bool:
    """The (dotted) key has a value in `raw`; episode_minutes counts its samples too."""
    if key == "episode_minutes" and raw.get("episode_minutes_samples") is not None:
        return True
    value: Any = raw
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value is not None


# --- one reading of a run -------------------------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """What the record cannot know, and where it comes from: a workload file or a stack's block.

    `raw` holds workload keys (may be empty: the record alone); `source` names it for the labels
    ("" when there is none); `grant` and `left_out` are a stack's (spoteval.placement.inputs)."""

    raw: Mapping[str, Any]
    source: str = ""
    grant: Grant | None = None
    left_out: Mapping[str, str] | None = None

    @classmethod
    def of(cls, loaded: placement.LoadedWorkload | None) -> Base:
        """The base a loaded workload (a file, a stack's block) gives; None: the record alone."""
        if loaded is None:
            return cls({})
        return cls(loaded.raw, loaded.source, loaded.grant, loaded.left_out)


@dataclass(frozen=True)
class NextRun:
    """The workload for the next run, and where each of its inputs came from."""

    run_id: str
    base: Base
    raw: dict[str, Any]
    #: (key, why) the run could not measure and the base gives
    from_base: tuple[tuple[str, str], ...]
    #: (key, why) nobody gives: no decision can be made
    missing: tuple[tuple[str, str], ...]
    #: why tau is only a lower bound (no preemption observed), None when it is an estimate or given
    tau_bound: str | None

    @property
    def source(self) -> str:
        """The placement's heading: the run, and what filled in what it could not know."""
        given = f", the rest from {self.base.source}" if self.base.source else ", nothing else given"
        return f"run {self.run_id}: the numbers it measured{given}"

    def labels(self) -> dict[str, str]:
        """Where each row of the placement's Inputs came from (spoteval.placement.render)."""
        taken = {key for key, _ in self.from_base}
        base = self.base.source or "the workload"
        run = f"measured in run {self.run_id}"

        def where(*keys: str) -> str:
            parts = [f"{k} from {base} (not measured)" for k in keys if k in taken]
            return "; ".join(parts) or run

        out = {
            "episodes": where("episode_minutes", "concurrency"),
            "lifetime": where("lifetime_hours"),
            "restart": where("restart.wait_minutes", "restart.boot_minutes"),
            "prices": f"spot {where('prices.spot')}"
            + (f"; the others from {base}" if self.base.source else ""),
        }
        if self.tau_bound is not None:
            out["lifetime bound"] = self.tau_bound
            out["lifetime"] = run
        return out

    def loaded(self) -> placement.LoadedWorkload:
        """The workload for `scripts.placement`: the merged raw, the stack's grant, the labels."""
        return placement.LoadedWorkload(
            raw=self.raw,
            where="workload",
            source=self.source,
            grant=self.base.grant,
            left_out=dict(self.base.left_out or {}),
            labels=self.labels(),
        )

    def note(self) -> str:
        """One line for the report: where the inputs came from, what is a bound, what is missing."""
        if self.base.source:
            parts = [f"the numbers this run measured, the rest from {self.base.source}"]
        else:
            parts = ["the numbers this run measured alone (no --workload or --stack: only spot is priced)"]
        if self.from_base:
            given = ", ".join(f"{k} ({why})" for k, why in self.from_base)
            parts.append(f"not measured in this run, so from {self.base.source} too: {given}")
        if self.tau_bound is not None:
            parts.append(f"tau is a lower bound ({self.tau_bound})")
        if self.missing:
            given = ", ".join(f"{k} ({why})" for k, why in self.missing)
            parts.append(f"not measured in this run and not given: {given}: give them in --workload FILE")
        return "; ".join(parts)


def next_run(report: RunReport, base: Base) -> NextRun:
    """The next run's workload from `report` and `base` (see the module docstring)."""
    raw = workload_from_run(report, base.raw)
    from_base: list[tuple[str, str]] = []
    missing: list[tuple[str, str]] = []
    for key, why in unmeasured_keys(report):
        if key == "lifetime_hours" and report.tau is not None and report.tau.seconds is None:
            if _has(base.raw, key):
                from_base.append((key, "no preemption in the run"))
            continue  # the lower bound stands in
        (from_base if _has(base.raw, key) else missing).append((key, why))
    tau = report.tau
    bound = None
    if tau is not None and tau.seconds is None and not _has(base.raw, "lifetime_hours") and tau.low_s > 0:
        bound = (
            f"no preemption in {seconds(tau.uptime_s)} of uptime in run {report.record.run_id}: "
            f"the {tau.confidence:.0%} interval's low end"
        )
    return NextRun(report.record.run_id, base, raw, tuple(from_base), tuple(missing), bound)


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


def decide_next(nxt: NextRun) -> dict[str, Any]:
    """The decision for the next run, as `scripts.placement --from-run` makes it (same defaults)."""
    return placement.decide(nxt.loaded().parse()).document()


def measured_workload(store: Store, run_id: str, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """`workload_from_run` of the run `run_id` in `store`."""
    return workload_from_run(analyse(load_run(store, run_id)), base)


def read_next_run(store: Store, run_id: str, base: Base) -> NextRun:
    """The next run's workload from the run `run_id` in `store` (what `placement --from-run` reads)."""
    return next_run(analyse(load_run(store, run_id)), base)


def build(
    store: Store,
    run_id: str,
    base: Mapping[str, Any] | Base | None,
    base_source: str = "",
    *,
    stack: str | None = None,
) -> RunReport:
    """Load, analyse, and attach the placement decision for the next run (with its note) and, when
    the base (the user's workload file or the stack's block, never the built-in example) has a
    deadline, what its spot policy says about it now (`stack` names the flip it asks for)."""
    if not isinstance(base, Base):
        base = Base(base or {}, base_source)
    rep = analyse(load_run(store, run_id))
    if base.raw:
        rep = with_deadline(rep, base.raw, stack)
    nxt = next_run(rep, base)
    if nxt.missing:
        return replace(rep, placement=None, placement_note=f"not decided: {nxt.note()}")
    rep = with_placement(rep, lambda _: decide_next(nxt), nxt.raw)
    if rep.placement is None:
        return replace(rep, placement_note=f"{rep.placement_note}; {nxt.note()}")
    return replace(rep, placement_note=nxt.note())
