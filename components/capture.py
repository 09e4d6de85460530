"""The `event_capture` stack output: where the stack keeps the provider's interruption events, in the
shape spoteval/events reads (`Capture`), computed from the same settings the components declare
them from (AWS: components/aws_rules.py; GCP: components/gcp.py; Azure: the resource group's
Activity Log; Kubernetes: the Job's pods). Nebius and Runpod keep none: no output."""

from __future__ import annotations

from typing import Any, Final

from components.settings import Settings
from spoteval.events.base import OUTPUT

#: the output's name (spoteval/events/base.py owns it: the report reads it)
EVENT_CAPTURE: Final = OUTPUT


def aws_log_group(settings: Settings) -> str:
    return f"/spot-eval/{settings.run_id}/ec2-events"


def gcp_log_bucket(settings: Settings) -> str:
    return f"spot-eval-{settings.run_id}"


def event_capture(settings: Settings) -> dict[str, str] | None:
    """The output's value for this stack, or None when its provider keeps no events spot-eval reads."""
    block: Any = settings.block  # the provider's own block, read by name: no provider module imported
    if settings.provider == "aws":
        return {"kind": "cloudwatch_logs", "log_group": aws_log_group(settings)}
    if settings.provider == "gcp":
        return {
            "kind": "cloud_logging",
            "project": str(block.project),
            "log_bucket": gcp_log_bucket(settings),
            "location": "global",
        }
    if settings.provider == "azure":
        return {"kind": "activity_log", "resource_group": str(block.resource_group)}
    if settings.provider == "k8s":
        return {"kind": "pod_conditions", "namespace": str(block.namespace)}
    return None
