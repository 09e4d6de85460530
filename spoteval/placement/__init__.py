"""The placement decision: spot, on-demand, or a non-preemptible box, and why.

    workload.py   what a user writes, parsed (`parse_workload`, `Workload`, `EXAMPLE_WORKLOAD`)
    closed_form.py  the closed form (`closed_form`, `spot_billed_hours`)
    model.py      the decision rule (`place`, `break_even`)
    simulate.py   the Monte-Carlo of the same workload (discrete episodes, any lifetime distribution)
    samplers.py   durations for it: fixed, exponential, or drawn from observed values
    engine.py     what its engines share, and the `lockstep` engine (one episode length)
    events.py     the `events` engine (episode samples)
    ticks.py      the tick engine of the deadline policies (a trace in order, or drawn lifetimes)
    policies.py   the deadline policies: Greedy and Uniform Progress ("Can't Be Late", NSDI 2024)
    availability.py  spot capacity over time: trace files and their readings, ordered replay
    lifetime.py   tau from lifetimes with censoring, and a trace's lifetimes and waits
    decision.py   `decide`: simulation + closed form + cross-check, as the CLI and the report make it
    inputs.py     where a workload comes from (file, stack, example)
    render.py     the text report and the plot

The names below are the package's interface (`from spoteval import placement; placement.decide(...)`).
"""

from __future__ import annotations

from spoteval.placement.availability import REPLAY_MODES, TRACE_KINDS, TRACE_READINGS
from spoteval.placement.choice import PolicyChoice, choose_policy
from spoteval.placement.closed_form import Estimate, closed_form, hours, money, spot_billed_hours
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
    OptionResult,
    Placement,
    SpotPolicy,
    break_even,
    place,
)
from spoteval.placement.policies import DEADLINE_POLICIES, POLICIES, POLICY_CHOICES
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
    "DEADLINE_POLICIES",
    "DEFAULT_RUNS",
    "DEFAULT_SEED",
    "EXAMPLE_WORKLOAD",
    "EXAMPLE_WORKLOAD_YAML",
    "NEVER_FINISHES_HOURS",
    "OPTIONS",
    "POLICIES",
    "POLICY_CHOICES",
    "PRICE_KEYS",
    "REPLAY_MODES",
    "RESTART_KEYS",
    "STACK_WORKLOAD_KEY",
    "TRACE_KINDS",
    "TRACE_READINGS",
    "WAIT_MODELS",
    "WORKLOAD_KEYS",
    "BreakEven",
    "Decided",
    "Estimate",
    "LoadedWorkload",
    "OptionResult",
    "Placement",
    "PlacementError",
    "PolicyChoice",
    "Prices",
    "SimulationInputs",
    "SpotPolicy",
    "Workload",
    "break_even",
    "choose_policy",
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
