"""Control plane per provider: price now, state, stop, start, address, simulated preemption.

One interface (`ControlPlane`, in base.py), one module per provider (aws.py, gcp.py, azure.py,
kubernetes.py, nebius.py, runpod.py, each parsing its own options), and a registry (registry.py)
mapping the provider name in the stack's outputs to a factory. Provider SDKs are imported only when
their factory is called, so using one provider never needs the others installed.

`stop()` and `start()` block until the node has reached the state (or raise `ControlPlaneError`);
asking about state or price never starts or stops anything.
"""

from __future__ import annotations

from spoteval.clouds.base import (
    OUTPUT_KEYS,
    PRIVATE_ADDRESS_KINDS,
    STATUSES,
    CapacityError,
    ControlPlane,
    ControlPlaneError,
    HttpGet,
    NodeState,
    PlaneOptions,
    StackOutputs,
    configured_price,
    http_get_json,
    wait_for,
)
from spoteval.clouds.registry import PROVIDERS, Factory, PlaneConfig, open_plane
from spoteval.price import Price

__all__ = [
    "OUTPUT_KEYS",
    "PRIVATE_ADDRESS_KINDS",
    "PROVIDERS",
    "STATUSES",
    "CapacityError",
    "ControlPlane",
    "ControlPlaneError",
    "Factory",
    "HttpGet",
    "NodeState",
    "PlaneConfig",
    "PlaneOptions",
    "Price",
    "StackOutputs",
    "configured_price",
    "http_get_json",
    "open_plane",
    "wait_for",
]
