"""The restart-cost measurement S on a deployed stack: forced stop/start (or preemption) cycles.

    phases.py   the phases of a cycle, their labels, the measurement's errors
    inputs.py   the stack's outputs, its grant, what its config adds (`load_inputs`)
    probe.py    the model server's answers and the run record's events
    cycle.py    `Measurement`: the cycles, each phase timed, every stop/start written to the record
    render.py   the plan, the report and the plot for people
    command.py  `run(Options(...), out, err)`: what `python -m scripts.measure_restart` does

S_wait = start; S_boot = serve + first_token + agent_ready; S = S_wait + S_boot. Every start is
preceded by a price read and the grant's checks (spoteval/grant.py).
"""

from __future__ import annotations

from spoteval.measure.command import Options, run
from spoteval.measure.cycle import CycleResult, Measurement, Timeouts, spread
from spoteval.measure.inputs import Inputs, load_grant, load_inputs, stack_config, stack_outputs
from spoteval.measure.phases import (
    BOOT_PHASES,
    GCP_KEY_ENV,
    PHASE_LABELS,
    PHASES,
    PROG,
    WAIT_PHASES,
    HealthError,
    MeasureError,
    Refused,
)
from spoteval.measure.probe import first_token, read_events, wait_models
from spoteval.measure.render import plot, print_plan, print_report

__all__ = [
    "BOOT_PHASES",
    "GCP_KEY_ENV",
    "PHASES",
    "PHASE_LABELS",
    "PROG",
    "WAIT_PHASES",
    "CycleResult",
    "HealthError",
    "Inputs",
    "MeasureError",
    "Measurement",
    "Options",
    "Refused",
    "Timeouts",
    "first_token",
    "load_grant",
    "load_inputs",
    "plot",
    "print_plan",
    "print_report",
    "read_events",
    "run",
    "spread",
    "stack_config",
    "stack_outputs",
    "wait_models",
]
