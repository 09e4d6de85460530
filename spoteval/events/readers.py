"""Provider name (the stack's `provider` output) -> the reader of the event history its stack keeps.

The readers' SDKs are imported only when their factory is called (Nebius and Runpod keep no event
history). The control planes (`spoteval.clouds`) know nothing of these readers: the events sit
above them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from spoteval.clouds.base import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.events.base import Capture, EventReader
from spoteval.providers import UnknownProvider, facts

EventsFactory = Callable[[Capture, StackOutputs, PlaneOptions], EventReader]


def _aws_events(capture: Capture, outputs: StackOutputs, options: PlaneOptions) -> EventReader:
    from spoteval.events import aws

    return aws.connect(capture, outputs.region)


def _gcp_events(capture: Capture, outputs: StackOutputs, options: PlaneOptions) -> EventReader:
    from spoteval.events import gcp

    return gcp.connect(capture)


def _azure_events(capture: Capture, outputs: StackOutputs, options: PlaneOptions) -> EventReader:
    from spoteval.events import azure

    subscription = options.own("azure").get("subscription") or os.environ.get("AZURE_SUBSCRIPTION_ID")
    return azure.connect(capture, subscription)


def _kubernetes_events(capture: Capture, outputs: StackOutputs, options: PlaneOptions) -> EventReader:
    from spoteval.events import kubernetes

    return kubernetes.connect(capture, outputs.node_ids[0])


#: provider key -> the reader of the events its stack keeps (Nebius and Runpod keep none)
EVENT_READERS: Final[dict[str, EventsFactory]] = {
    "aws": _aws_events,
    "gcp": _gcp_events,
    "azure": _azure_events,
    "k8s": _kubernetes_events,
}


def open_events(capture: Capture, outputs: StackOutputs, options: PlaneOptions) -> EventReader:
    """The reader of the stack's event capture; ControlPlaneError for a provider that has none."""
    try:
        key = facts(outputs.provider).key
    except UnknownProvider as exc:
        raise ControlPlaneError(str(exc)) from None
    factory = EVENT_READERS.get(key)
    if factory is None:
        raise ControlPlaneError(f"{outputs.provider}: spot-eval has no reader of this provider's events")
    return factory(capture, outputs, options)
