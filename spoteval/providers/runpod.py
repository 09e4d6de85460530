"""Runpod pods: every fact spot-eval relies on, each with its source and the date checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    InstanceShape,
    K8sFlavour,
    Lacks,
    PriceApi,
    ProviderFacts,
    Source,
    cited,
)

KEY: Final = "runpod"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.runpod:RunpodPlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.runpod"

_RP_PRICING = "https://docs.runpod.io/pods/pricing"
_RP_V2 = "https://github.com/runpod/docs/blob/main/api-reference-v2/openapi.json"
_RP_NO_SPOT = Source(
    "https://docs.runpod.io/api-reference-v2/pods/create-a-pod",
    note="REST v2 CreatePodRequest has no interruptible or bid field; REST v1 (`interruptible`) retired "
    "2026-11-15; GraphQL podRentInterruptable out of the docs (runpod/docs#626) and being removed "
    "(runpod/runpodctl#267)",
)
#: network volumes exist in Secure Cloud only
RUNPOD_NETWORK_VOLUMES: Final = Source("https://docs.runpod.io/storage/network-volumes")
#: the RUNPOD_API_KEY Runpod sets inside a pod (what the agent's API stop uses)
RUNPOD_POD_KEY: Final = Source(
    "https://docs.runpod.io/pods/templates/environment-variables",
    note="pod-scoped; that REST v2 takes it for the pod's own stop action is [unconfirmed]",
)

PRICE: Final = PriceApi(
    url="https://api.runpod.io/v2",
    version="REST v2 (GET /v2/catalog/gpus/{id}: price.secure, price.community per GPU-hour)",
    auth="API key",
)

FACTS: Final = ProviderFacts(
    name="runpod",
    key="runpod",
    title="Runpod on-demand pod",
    notice_s=5,
    notice_via="SIGTERM to the container's main process, SIGKILL 5 s later",
    sigterm_grace_s=5.0,
    metadata=None,
    price=PRICE,
    api_urls={"rest": "https://api.runpod.io/v2"},
    billed_from_boot=False,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="no interruptible pods; a stopped pod is started with the start action (same host); the "
    "container disk is erased, a network volume kept; it may come back with fewer GPUs",
    address="tied to the host; the public port differs from the private one",
    default_address="ephemeral",
    takes_bid=False,
    markets=("on_demand",),
    os_poweroff="a Runpod pod is stopped through the provider's API, not from inside",
    os_poweroff_billed=None,
    api_stop=True,
    sources=cited(
        (_RP_PRICING, "notice_s notice_via sigterm_grace_s metadata billed_from_boot"),
        (_RP_V2, "price api_urls restarts_itself can_stay_stopped restart os_poweroff os_poweroff_billed"),
        (RUNPOD_POD_KEY, "api_stop"),
        (_RP_NO_SPOT, "takes_bid markets"),
        (RUNPOD_NETWORK_VOLUMES, "address default_address"),
    ),
)

#: SIGTERM to the container; no metadata service
NOTICES: Final = Lacks("notices", "SIGTERM only, no metadata service", Source(_RP_PRICING))
CAPACITY_CODES: Final = frozenset[str]()
CAPACITY_SOURCE: Final = None
REGIONS: Final = Lacks(
    "regions", "a pod is placed by its GPU type and cloud type; the stack names no zone", Source(_RP_V2)
)
#: a Runpod pool is N single pods, each stopping itself through the API (`on_done: api_stop`)
POOLS: Final = Lacks("pools", "a pool is N single pods", Source(_RP_V2))
GROUP_PLANE: Final = ""
POOL_SCALE: Final = Lacks("pool scaling", "each pod stops itself through the API", Source(_RP_V2))
# Runpod's REST API v2 has no event history of a pod (only its current status). No reader.
EVENTS: Final = Lacks(
    "event history",
    "REST API v2: a pod's current status only, no event history",
    Source("https://docs.runpod.io/api-reference-v2/pods/get-a-pod"),
)
#: an offer is a GPU type times the stack's `gpu_count`: no table
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {}


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs of a pod: the stack's `node.gpu_count` (its instance type is a GPU type)."""
    return stack_gpu_count or 1


PERMISSIONS: Final[Mapping[str, Source]] = {}

ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}
AGENT_METRIC: Final = Lacks("agent metric", "the pod stops itself through the API", Source(_RP_V2))

#: a simulated preemption needs no option of the plane
PREEMPT_OPTION: Final = Lacks(
    "preemption option", "the plane simulates a preemption by itself", Source(_RP_V2)
)
