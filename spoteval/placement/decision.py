"""The placement decision as the CLI and the run report make it: closed form, simulation, cross-check.

`decide(workload)` simulates the workload (spot's chance of meeting the deadline under each spot
policy, the cost spread of every strategy), picks the spot policy under a deadline (the cheapest of
spoteval.placement.policies.POLICIES that meets it with probability >= `deadline_confidence`),
decides with spoteval.placement.model and collects the warnings; `Decided.document()` is what
`python -m scripts.placement --json` prints. The defaults (`DEFAULT_RUNS` simulated runs,
`DEFAULT_SEED`, waits fixed at the workload's W, no trace; a trace replayed in order) are the CLI's
defaults too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spoteval.placement.availability import REPLAY_MODES, Trace, read_trace_file
from spoteval.placement.choice import PolicyChoice, choose_policy, policy_reasons
from spoteval.placement.closed_form import closed_form, money
from spoteval.placement.lifetime import LifetimeEstimate, trace_runs
from spoteval.placement.model import Placement, place
from spoteval.placement.simulate import (
    DEFAULT_RUNS,
    DEFAULT_SEED,
    DURATION_MODELS,
    Empirical,
    Fixed,
    Sampler,
    Simulation,
    simulate,
)
from spoteval.placement.workload import PlacementError, Workload, check_deadline

#: how capacity waits are drawn in the simulation: the workload's W fixed or exponential, or a trace's
WAIT_MODELS = (*DURATION_MODELS, "trace")


@dataclass(frozen=True)
class SimulationInputs:
    lifetimes: Sampler | None = None
    waits: Sampler | None = None
    trace: LifetimeEstimate | None = None
    trace_source: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: the trace to replay in order (spot capacity tick by tick), or None for drawn lifetimes
    ordered: Trace | None = None
    trace_kind: str | None = None


def simulation_inputs(
    workload: Workload,
    *,
    trace: str | Path | None = None,
    waits: str | None = None,
    reading: str | None = None,
    replay: str | None = None,
) -> SimulationInputs:
    """Lifetimes and waits for the simulation: exponential/fixed, or from a `trace` file.

    `reading` is how the trace's values read (spoteval.placement.availability.TRACE_READINGS; by
    default `count`, the published files), `replay` "ordered" (the default: the trace's spot capacity
    in order) or "draw" (its lifetimes and waits drawn independently). `waits` is one of WAIT_MODELS;
    by default "trace" with a trace, else "fixed"; the ordered replay takes its waits from the trace.
    """
    if replay is not None and replay not in REPLAY_MODES:
        raise PlacementError("--replay", f"must be one of {', '.join(REPLAY_MODES)}, got {replay!r}")
    if not trace and (replay is not None or reading is not None):
        raise PlacementError("--replay" if replay is not None else "--trace-values", "needs --trace FILE")
    waits_model = waits or ("trace" if trace else "fixed")
    if waits_model == "trace" and not trace:
        raise PlacementError("--waits", "trace needs --trace FILE")
    if not trace:
        return SimulationInputs(waits=DURATION_MODELS[waits_model](workload.wait_hours))
    ordered = (replay or "ordered") == "ordered"
    if ordered and waits_model != "trace":
        raise PlacementError(
            "--waits", "the ordered replay takes its waits from the trace (or give --replay draw)"
        )
    file = read_trace_file(trace, reading or "count")
    runs = trace_runs((~file.up()).astype("int64"), file.gap_seconds, source=file.source)
    if not ordered and not runs.lifetimes_hours:
        raise PlacementError(str(trace), "no preemption in the trace: there is no lifetime to replay")
    if ordered and not runs.lifetimes_hours and not runs.censored_lifetime_hours:
        raise PlacementError(str(trace), "spot is never up in the trace: there is nothing to replay")
    if not runs.lifetimes_hours:
        return SimulationInputs(
            ordered=file, trace_kind=file.kind, trace_source=file.source, warnings=("trace: no preemption",)
        )
    estimate = runs.estimate()
    warnings = [f"trace: {w}" for w in estimate.warnings]
    low, high = estimate.interval_hours
    if not low <= workload.lifetime_hours <= high:
        warnings.append(
            f"the workload's lifetime_hours {workload.lifetime_hours:g} is outside the trace's "
            f"{estimate.confidence:.0%} interval [{low:.3g}, {high:.3g}] h"
        )
    sampler: Sampler
    if waits_model != "trace":
        sampler = DURATION_MODELS[waits_model](workload.wait_hours)
    elif runs.waits_hours:
        sampler = Empirical(runs.waits_hours, "trace capacity waits")
    else:
        sampler = Fixed(workload.wait_hours)
        warnings.append("the trace has no complete capacity wait: the simulation uses the workload's wait")
    return SimulationInputs(
        lifetimes=Empirical(runs.lifetimes_hours, "trace lifetimes"),
        waits=sampler,
        trace=estimate,
        trace_source=runs.source,
        warnings=tuple(warnings),
        ordered=file if ordered else None,
        trace_kind=file.kind,
    )


def cross_check(placement: Placement, simulation: Simulation) -> list[str]:
    """Warn when the simulated mean cost of spot is far from the closed form's (over 10%)."""
    sim = simulation.strategies.get("spot")
    closed = closed_form(placement.workload)["spot"].expected_cost
    if sim is None or not math.isfinite(closed) or closed <= 0:
        return []
    gap = sim.mean_cost / closed - 1
    if abs(gap) <= 0.10:
        return []
    how = (
        "the trace's capacity in order"
        if simulation.engine == "ticks"
        else f"lifetimes {simulation.lifetimes}"
    )
    return [
        f"the simulated mean cost of spot ({money(sim.mean_cost)}, {how}) is "
        f"{abs(gap):.0%} {'above' if gap > 0 else 'below'} the closed form's {money(closed)}"
    ]


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def document(
    placement: Placement,
    simulation: Simulation,
    inputs: SimulationInputs,
    warnings: list[str],
    policy: PolicyChoice | None = None,
) -> dict[str, Any]:
    """The JSON document of `--json`."""
    simulated = simulation.to_json()
    simulated["warnings"] = warnings
    simulated["trace"] = (
        {"source": inputs.trace_source, "kind": inputs.trace_kind, **inputs.trace.to_json()}
        if inputs.trace is not None
        else None
    )
    doc = placement.to_json(simulated)
    doc["spot_policy"] = policy.to_json() if policy is not None else None
    safe: dict[str, Any] = _json_safe(doc)
    return safe


@dataclass(frozen=True)
class Decided:
    """A decision with what it was made from: the closed form, the simulation and their warnings,
    and (under a deadline) the spot policy."""

    placement: Placement
    simulation: Simulation
    inputs: SimulationInputs
    warnings: list[str]
    policy: PolicyChoice | None = None

    def document(self) -> dict[str, Any]:
        """What `--json` prints."""
        return document(self.placement, self.simulation, self.inputs, self.warnings, self.policy)


def decide(
    workload: Workload,
    *,
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    trace: str | Path | None = None,
    waits: str | None = None,
    trace_values: str | None = None,
    replay: str | None = None,
) -> Decided:
    """Simulate the workload (each spot policy's deadline chance, the cross-check) and decide."""
    check_deadline(workload)
    inputs = simulation_inputs(workload, trace=trace, waits=waits, reading=trace_values, replay=replay)
    simulation = simulate(
        workload,
        runs=runs,
        seed=seed,
        lifetimes=inputs.lifetimes,
        waits=inputs.waits,
        trace=inputs.ordered,
    )
    choice = choose_policy(workload, simulation)
    spot = simulation.strategies.get("spot")
    placement = place(
        workload,
        spot.p_deadline if spot else None,
        simulation.runs if spot or choice else None,
        policy=choice.spot_policy(workload) if choice is not None else None,
    )
    if choice is not None and placement.decision == "spot":
        reasons = list(placement.reasons)
        at = next((i + 1 for i, r in enumerate(reasons) if r.startswith("spot meets the")), len(reasons))
        reasons[at:at] = policy_reasons(choice, workload, runs)
        placement = replace(placement, reasons=tuple(reasons))
    warnings = [*inputs.warnings, *cross_check(placement, simulation)]
    return Decided(placement, simulation, inputs, warnings, choice)
