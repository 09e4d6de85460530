"""Nebius preemptible VMs: every fact spot-eval relies on, each with its source and the date checked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    InstanceShape,
    K8sFlavour,
    Lacks,
    Metadata,
    PriceApi,
    ProviderFacts,
    Source,
    cited,
)

KEY: Final = "nebius"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.nebius:NebiusPlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.nebius"

_NB_PREEMPTIBLE = "https://docs.nebius.com/compute/virtual-machines/preemptible"
_NB_PROTO = "https://github.com/nebius/api/blob/main/nebius/compute/v1/instance.proto"
_NB_METADATA = "https://docs.nebius.com/compute/virtual-machines/metadata"
_NB_TERMS = "https://docs.nebius.com/legal/specific-terms/compute"
_NB_PRICE = "https://github.com/nebius/api/tree/main/nebius/billing/v1alpha1"
_NB_STORAGE = "https://docs.nebius.com/object-storage/interfaces/aws-cli"
_NB_PRICING = "https://github.com/nebius/api/blob/main/nebius/billing/v1/pricing_policy.proto"
_NB_BID = Source(
    _NB_PRICING,
    note="pulumi-nebius 0.6.73 / nebius SDK billing.v1 MaxPriceV1: per-GPU hourly USD, decimal "
    "string, 3 digits; the instance's spot_pricing_policy {id}: above it the VM is preempted; "
    "mutable only while no VM runs under the policy; checked 2026-12-02",
)
_NB_GUEST_SHUTDOWN = Source(
    _NB_PROTO,
    note="recovery_policy FAIL: a guest shutdown stops the VM, not restarted; preemptible.priority: "
    "deprecated 2026-05-11, no effect",
)

METADATA: Final = Metadata(
    base_url="http://metadata.nebius.internal",
    headers={"Metadata": "true"},
    paths={"instance_data": "/v1/instance-data", "token": "/v1/iam/sa/token"},
)

PRICE: Final = PriceApi(
    url=None,
    version="billing.v1alpha1 SpotPriceService (gRPC, nebius SDK)",
    auth="account credentials",
)

FACTS: Final = ProviderFacts(
    name="nebius",
    key="nebius",
    title="Nebius preemptible VM",
    notice_s=60,
    notice_via="SIGTERM to the VM's processes 60 s before the stop, then SIGKILL; no metadata notice",
    sigterm_grace_s=60.0,
    metadata=METADATA,
    price=PRICE,
    api_urls={"object_storage": "https://storage.{region}.nebius.cloud"},
    billed_from_boot=True,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="on_preemption STOP only; volumes are kept; the VM is not restarted: someone must start "
    "it through the API; with recovery_policy FAIL a shutdown from inside stops the VM",
    address="a dynamic public IP is released on stop; a static one (or an allocation) stays",
    default_address="ephemeral",
    takes_bid=True,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed=None,
    api_stop=False,
    sources=cited(
        (
            _NB_PREEMPTIBLE,
            "notice_s notice_via sigterm_grace_s restarts_itself can_stay_stopped"
            " address default_address markets",
        ),
        (_NB_METADATA, "metadata"),
        (_NB_PRICE, "price"),
        (_NB_STORAGE, "api_urls"),
        (_NB_TERMS, "billed_from_boot"),
        (_NB_PROTO, "restart"),
        (_NB_BID, "takes_bid"),
        (_NB_GUEST_SHUTDOWN, "os_poweroff os_poweroff_billed api_stop"),
    ),
)

#: SIGTERM to the VM's processes; the metadata service gives no notice
NOTICES: Final = Lacks("notices", "SIGTERM only, no metadata notice", Source(_NB_PREEMPTIBLE))
CAPACITY_CODES: Final = frozenset[str]()
CAPACITY_SOURCE: Final = None
REGIONS: Final = Lacks("regions", "the stack's region is checked by the API", Source(_NB_PREEMPTIBLE))
#: a Nebius pool is N single nodes, each stopping itself through the API (`on_done: api_stop`)
POOLS: Final = Lacks("pools", "a pool is N single nodes", Source(_NB_PROTO))
GROUP_PLANE: Final = ""
POOL_SCALE: Final = Lacks("pool scaling", "each node stops itself through the API", Source(_NB_PROTO))
# Nebius has an audit-event API (nebius.audit.v2 AuditEventService.List); whether the platform's
# stop of a preempted VM is an audit event is not documented. No reader.
EVENTS: Final = Lacks(
    "event history",
    "preemptions as audit events: not documented",
    Source("https://github.com/nebius/api/tree/main/nebius/audit/v2"),
)
#: presets carry their GPU count in their name (`1gpu-16vcpu-200gb`): no table
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {}
#: `MaxPriceV1.max_price`: "Per-GPU hourly limit in USD, decimal string 3 digits precision"
#: (nebius SDK billing.v1 and pulumi-nebius 0.6.73, checked 2026-12-02; source: _NB_BID)
MAX_PRICE_DECIMALS: Final = 3
MAX_PRICE_SOURCE: Final = _NB_BID
#: How a price preemption is told apart: the compute API's InstanceStatus (state, reconciling,
#: maintenance_event_id, ...) has no stop reason (nebius SDK compute.v1, checked 2026-12-02); the
#: pricing policy's `status.scheduling_state` SCHEDULING_STATE_BLOCKED says "the maxPrice limit is
#: below the market price in force", a state of the policy, not a cause of one stop: a price
#: preemption is not told apart from a capacity one [unconfirmed: no Nebius field names it].
STOP_REASON: Final = Lacks("stop reason", "no per-VM stop reason in compute.v1 InstanceStatus", _NB_BID)
_GPUS: Final = re.compile(r"^(\d+)gpu-")


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int:
    """GPUs of `PLATFORM/PRESET` (`gpu-h100-sxm/1gpu-16vcpu-200gb` -> 1); 1 when the preset says none."""
    preset = instance_type.rsplit("/", 1)[-1]
    m = _GPUS.match(preset)
    return int(m.group(1)) if m else 1


_ACTIONS = "https://docs.nebius.com/object-storage/supported-actions"

#: Nebius roles by use: the node's (bucket policy rules with key or "prefix*" paths, storage/v1/
#: bucket_policy.proto; a permit on the secret) and the operator's. Documented: general, storage.*
ROLES: Final[Mapping[str, tuple[str, Source]]] = {
    "write": ("storage.uploader", Source(_ACTIONS, note="PutObject, multipart; no Get, no Delete")),
    "read": ("storage.object-viewer", Source(_ACTIONS, note="GetObject, HeadObject")),
    "list": (
        "storage.object-lister",
        Source(_ACTIONS, note="key names; whether a prefix rule covers listing: [unconfirmed]"),
    ),
    "secret": (
        "mysterybox.payload-viewer",
        Source("https://docs.nebius.com/mysterybox/secrets/create-version", note="sub-role of admin only"),
    ),
    "operator": (
        "editor",
        Source("https://docs.nebius.com/iam/authorization/roles", note="start/stop; no compute-only role"),
    ),
}
PERMISSIONS: Final[Mapping[str, Source]] = {}

FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}
AGENT_METRIC: Final = Lacks("agent metric", "the node stops itself through the API", Source(_NB_PROTO))

#: a simulated preemption needs no option of the plane
PREEMPT_OPTION: Final = Lacks(
    "preemption option", "the plane simulates a preemption by itself", Source(_NB_PROTO)
)
