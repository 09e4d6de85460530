"""Tau and S per offer: from a run record, else a trace given for that offer, else the workload.

The run record (`--from-run`) is split by the (provider, region, instance type) its nodes' `start`
events name, and each part analysed by the report's own code (`spoteval.report.analyse`,
`workload_from_run`): tau and its interval, the capacity wait W and the restart overhead B measured
on that kind of node. A trace given for an offer (`spoteval.placement.lifetime.read_trace`) gives tau, its
interval and the capacity waits W (a trace has no boots: B stays the workload's), and its lifetimes
are replayed in the offer's simulation. Whatever neither gives comes from the workload; an offer
whose tau comes from the workload is marked, since nothing was measured for it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.placement import PlacementError, Workload

#: (provider, region, instance type)
OfferKey = tuple[str, str, str]
SOURCES: Final = ("run", "trace", "workload")


@dataclass(frozen=True)
class Measured:
    """Numbers measured for one kind of node (None where the source could not measure one)."""

    source: str  # "run" or "trace"
    detail: str
    lifetime_hours: float | None = None
    lifetime_interval_hours: tuple[float, float] | None = None
    wait_hours: float | None = None
    boot_hours: float | None = None
    trace: str | None = None  # the trace file whose lifetimes the simulation replays


@dataclass(frozen=True)
class Evidence:
    """Where one offer's tau, W and B come from, and their values (hours)."""

    tau_source: str
    wait_source: str
    boot_source: str
    detail: str
    lifetime_hours: float
    lifetime_interval_hours: tuple[float, float] | None
    wait_hours: float
    boot_hours: float
    trace: str | None = None

    @property
    def marked(self) -> bool:
        """True when nothing was measured for this offer's tau (the workload's is assumed)."""
        return self.tau_source == "workload"

    def to_json(self) -> dict[str, object]:
        return {
            "tau_source": self.tau_source,
            "wait_source": self.wait_source,
            "boot_source": self.boot_source,
            "detail": self.detail,
            "tau_assumed": self.marked,
            "trace": self.trace,
        }


def resolve(
    key: OfferKey, workload: Workload, sources: Mapping[str, Mapping[OfferKey, Measured]]
) -> Evidence:
    """The offer's tau, W and B: each from the first of run, trace, workload that has it."""
    found = [m for name in ("run", "trace") if (m := sources.get(name, {}).get(key)) is not None]
    tau, tau_from = _first(found, "lifetime_hours")
    wait, wait_from = _first(found, "wait_hours")
    boot, boot_from = _first(found, "boot_hours")
    interval = tau_from.lifetime_interval_hours if tau_from is not None else workload.lifetime_interval_hours
    detail = "; ".join(m.detail for m in found) or "nothing measured for this offer: the workload's numbers"
    return Evidence(
        tau_source=_source(tau_from),
        wait_source=_source(wait_from),
        boot_source=_source(boot_from),
        detail=detail,
        lifetime_hours=workload.lifetime_hours if tau is None else tau,
        lifetime_interval_hours=interval,
        wait_hours=workload.wait_hours if wait is None else wait,
        boot_hours=workload.boot_hours if boot is None else boot,
        trace=tau_from.trace if tau_from is not None and tau_from.source == "trace" else None,
    )


def _first(found: list[Measured], attr: str) -> tuple[float | None, Measured | None]:
    for m in found:
        value = getattr(m, attr)
        if value is not None:
            return float(value), m
    return None, None


def _source(measured: Measured | None) -> str:
    return "workload" if measured is None else measured.source


def from_trace(path: str) -> Measured:
    """tau, its interval and the capacity waits of a spot trace (`spoteval.placement.lifetime.read_trace`)."""
    from spoteval.placement.lifetime import read_trace

    runs = read_trace(path)
    estimate = runs.estimate()
    if estimate.tau_hours is None or not runs.lifetimes_hours:
        raise PlacementError(path, "no preemption in the trace: there is no lifetime to replay")
    low, high = estimate.interval_hours
    return Measured(
        source="trace",
        detail=f"trace {runs.source}: {estimate.preemptions} preemptions in {estimate.total_hours:.1f} h",
        lifetime_hours=float(estimate.tau_hours),
        lifetime_interval_hours=(low, high),
        wait_hours=statistics.fmean(runs.waits_hours) if runs.waits_hours else None,
        trace=path,
    )


def from_run(record: object) -> dict[OfferKey, Measured]:
    """Per (provider, region, instance type) of the record's nodes: what that part of the run measured.

    `record` is a `spoteval.report.RunRecord`; each part is analysed by the report's own code.
    """
    from spoteval import report

    assert isinstance(record, report.RunRecord)
    groups: dict[OfferKey, set[str]] = {}
    for event in record.events:
        if event.kind == "start" and event.provider and event.region and event.instance_type:
            groups.setdefault((event.provider, event.region, event.instance_type), set()).add(event.node)
    out: dict[OfferKey, Measured] = {}
    for key, nodes in sorted(groups.items()):
        part = dataclasses.replace(
            record,
            events=tuple(e for e in record.events if e.node in nodes),
            attempts=tuple(a for a in record.attempts if a.node in nodes),
        )
        rep = report.analyse(part)
        raw = report.workload_from_run(rep, {})
        restart = raw.get("restart") or {}
        interval = raw.get("lifetime_interval_hours")
        preemptions = rep.tau.preemptions if rep.tau is not None else 0
        out[key] = Measured(
            source="run",
            detail=(
                f"run {record.run_id}: {len(rep.allocations)} allocations of {len(nodes)} node(s), "
                f"{preemptions} preemptions"
            ),
            lifetime_hours=raw.get("lifetime_hours"),
            lifetime_interval_hours=(float(interval[0]), float(interval[1])) if interval else None,
            wait_hours=restart["wait_minutes"] / 60.0 if "wait_minutes" in restart else None,
            boot_hours=restart["boot_minutes"] / 60.0 if "boot_minutes" in restart else None,
        )
    return out
