"""The placement decision as the CLI and the run report make it: closed form, simulation, cross-check.

`decide(workload)` simulates the workload (spot's chance of meeting the deadline, the cost spread
of every strategy), decides with the closed form (spoteval.placement.model) and collects the
warnings; `Decided.document()` is what `python -m scripts.placement --json` prints. The defaults
(`DEFAULT_RUNS` simulated runs, `DEFAULT_SEED`, waits fixed at the workload's W, no trace) are the
CLI's defaults too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoteval.placement.lifetime import LifetimeEstimate, read_trace
from spoteval.placement.model import Placement, money, place
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
from spoteval.placement.workload import PlacementError, Workload

#: how capacity waits are drawn in the simulation: the workload's W fixed or exponential, or a trace's
WAIT_MODELS = (*DURATION_MODELS, "trace")


@dataclass(frozen=True)
class SimulationInputs:
    lifetimes: Sampler | None = None
    waits: Sampler | None = None
    trace: LifetimeEstimate | None = None
    trace_source: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def simulation_inputs(
    workload: Workload, *, trace: str | Path | None = None, waits: str | None = None
) -> SimulationInputs:
    """Lifetimes and waits for the simulation: exponential/fixed, or replayed from a `trace` file.

    `waits` is one of WAIT_MODELS; by default "trace" with a trace, else "fixed".
    """
    waits_model = waits or ("trace" if trace else "fixed")
    if waits_model == "trace" and not trace:
        raise PlacementError("--waits", "trace needs --trace FILE")
    if not trace:
        return SimulationInputs(waits=DURATION_MODELS[waits_model](workload.wait_hours))
    runs = read_trace(trace)
    if not runs.lifetimes_hours:
        raise PlacementError(str(trace), "no preemption in the trace: there is no lifetime to replay")
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
    )


def cross_check(placement: Placement, simulation: Simulation) -> list[str]:
    """Warn when the simulated mean cost of spot is far from the closed form's (over 10%)."""
    sim = simulation.strategies.get("spot")
    closed = placement.options["spot"].expected_cost
    if sim is None or not math.isfinite(closed) or closed <= 0:
        return []
    gap = sim.mean_cost / closed - 1
    if abs(gap) <= 0.10:
        return []
    return [
        f"the simulated mean cost of spot ({money(sim.mean_cost)}, lifetimes {simulation.lifetimes}) is "
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
    placement: Placement, simulation: Simulation, inputs: SimulationInputs, warnings: list[str]
) -> dict[str, Any]:
    """The JSON document of `--json`."""
    simulated = simulation.to_json()
    simulated["warnings"] = warnings
    simulated["trace"] = (
        {"source": inputs.trace_source, **inputs.trace.to_json()} if inputs.trace is not None else None
    )
    safe: dict[str, Any] = _json_safe(placement.to_json(simulated))
    return safe


@dataclass(frozen=True)
class Decided:
    """A decision with what it was made from: the closed form, the simulation and their warnings."""

    placement: Placement
    simulation: Simulation
    inputs: SimulationInputs
    warnings: list[str]

    def document(self) -> dict[str, Any]:
        """What `--json` prints."""
        return document(self.placement, self.simulation, self.inputs, self.warnings)


def decide(
    workload: Workload,
    *,
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    trace: str | Path | None = None,
    waits: str | None = None,
) -> Decided:
    """Simulate the workload (spot's deadline chance, the cross-check) and decide."""
    inputs = simulation_inputs(workload, trace=trace, waits=waits)
    simulation = simulate(workload, runs=runs, seed=seed, lifetimes=inputs.lifetimes, waits=inputs.waits)
    spot = simulation.strategies.get("spot")
    placement = place(workload, spot.p_deadline if spot else None, simulation.runs if spot else None)
    return Decided(placement, simulation, inputs, [*inputs.warnings, *cross_check(placement, simulation)])
