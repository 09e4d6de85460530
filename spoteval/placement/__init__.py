"""The placement decision: spot, on-demand, or a non-preemptible box, and why.

    workload.py   what a user writes, parsed (`parse_workload`, `Workload`, `EXAMPLE_WORKLOAD`)
    model.py      the closed form and the decision rule (`closed_form`, `place`, `break_even`)
    simulate.py   the Monte-Carlo of the same workload (discrete episodes, any lifetime distribution)
    samplers.py   durations for it: fixed, exponential, or drawn from observed values
    engine.py     its two vectorised engines
    lifetime.py   tau from lifetimes with censoring, and reading spot traces
    decision.py   `decide`: simulation + closed form + cross-check, as the CLI and the report make it
    inputs.py     where a workload comes from (file, stack, example)
    render.py     the text report and the plot

The names below are the package's interface (`from spoteval import placement; placement.decide(...)`).
"""

from __future__ import annotations

from spoteval.placement.decision import (
    WAIT_MODELS,
    Decided,
    SimulationInputs,
    cross_check,
    decide,
    document,
    simulation_inputs,
)
from spoteval.placement.inputs import (
    STACK_WORKLOAD_KEY,
    LoadedWorkload,
    example_workload,
    load_stack_workload,
    load_workload_file,
    load_yaml,
)
from spoteval.placement.model import (
    NEVER_FINISHES_HOURS,
    BreakEven,
    Estimate,
    OptionResult,
    Placement,
    break_even,
    closed_form,
    hours,
    money,
    place,
    spot_billed_hours,
)
from spoteval.placement.simulate import DEFAULT_RUNS, DEFAULT_SEED
from spoteval.placement.workload import (
    CONCURRENCY_PER,
    EXAMPLE_WORKLOAD,
    EXAMPLE_WORKLOAD_YAML,
    OPTIONS,
    PRICE_KEYS,
    RESTART_KEYS,
    WORKLOAD_KEYS,
    PlacementError,
    Prices,
    Workload,
    parse_workload,
)

__all__ = [
    "CONCURRENCY_PER",
    "DEFAULT_RUNS",
    "DEFAULT_SEED",
    "EXAMPLE_WORKLOAD",
    "EXAMPLE_WORKLOAD_YAML",
    "NEVER_FINISHES_HOURS",
    "OPTIONS",
    "PRICE_KEYS",
    "RESTART_KEYS",
    "STACK_WORKLOAD_KEY",
    "WAIT_MODELS",
    "WORKLOAD_KEYS",
    "BreakEven",
    "Decided",
    "Estimate",
    "LoadedWorkload",
    "OptionResult",
    "Placement",
    "PlacementError",
    "Prices",
    "SimulationInputs",
    "Workload",
    "break_even",
    "closed_form",
    "cross_check",
    "decide",
    "document",
    "example_workload",
    "hours",
    "load_stack_workload",
    "load_workload_file",
    "load_yaml",
    "money",
    "parse_workload",
    "place",
    "simulation_inputs",
    "spot_billed_hours",
]
