"""The restart measurement's phases, their labels, and its errors."""

from __future__ import annotations

from typing import Final

PROG: Final = "measure_restart"
#: Phases in the order they happen; S_wait and S_boot are made of the last four.
PHASES: Final = ("stop", "preempt", "price_check", "start", "serve", "first_token", "agent_ready")
WAIT_PHASES: Final = ("start",)
BOOT_PHASES: Final = ("serve", "first_token", "agent_ready")
PHASE_LABELS: Final = {
    "stop": "stop requested -> stopped (not in S)",
    "preempt": "preemption -> stopped (not in S)",
    "price_check": "price read, grant checked (not in S)",
    "start": "start requested -> running (S_wait)",
    "serve": "running -> /v1/models answers (S_boot)",
    "first_token": "one-token completion (S_boot)",
    "agent_ready": "agent's ready event in the record (S_boot)",
}
GCP_KEY_ENV: Final = "SPOTEVAL_GCP_BILLING_API_KEY"


class MeasureError(Exception):
    """Bad input or a setup that cannot work; the message names the option, file or key."""


class HealthError(Exception):
    """The model server did not answer as expected in time."""


class Refused(Exception):
    """The grant refused a start (already recorded as a `stop` with its stop rule)."""
