"""A toy eighth provider's fact module, as a new provider's would be written: every capability of
the `Provider` protocol, each fact with its source and date, a named none (`Lacks`) for each one it
lacks. tests/test_provider_registry.py copies it into spoteval/providers/ and registers it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    FACT_FIELDS,
    InstanceShape,
    K8sFlavour,
    Lacks,
    ProviderFacts,
    Regions,
    Source,
    cited,
    table_gpus,
)

KEY: Final = "toy"
PLANE: Final = "spoteval.clouds.toy:ToyPlane"
GROUP_PLANE: Final = ""
COMPONENT: Final = "components.toy"

_DOCS = "https://docs.example.com/toy/instances"

FACTS: Final = ProviderFacts(
    name="toy",
    key="toy",
    title="Toy GPU cloud",
    notice_s=10,
    notice_via="SIGTERM to the VM's processes, SIGKILL 10 s later",
    sigterm_grace_s=10.0,
    metadata=None,
    price=None,
    api_urls={},
    billed_from_boot=True,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="a stopped instance is started through the API",
    address="the public address is kept across stop and start",
    default_address="static",
    takes_bid=False,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed=None,
    api_stop=False,
    sources=cited((_DOCS, " ".join(FACT_FIELDS))),
)
NOTICES: Final = Lacks("notices", "SIGTERM only", Source(_DOCS))
PRICE: Final = Lacks("price API", "the toy cloud publishes no prices", Source(_DOCS))
CAPACITY_CODES: Final = frozenset[str]()
CAPACITY_SOURCE: Final = None
REGIONS: Final = Regions(region=r"^[a-z]+-[a-z]+-\d$", zone_suffix="", zones=(), source=Source(_DOCS))
POOLS: Final = Lacks("pools", "no group engine", Source(_DOCS))
POOL_SCALE: Final = Lacks("pool scaling", "no group engine", Source(_DOCS))
EVENTS: Final = Lacks("event history", "no event API", Source(_DOCS))
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {
    "gpu_1x_a10": InstanceShape(1, "nvidia-a10", 30, 200, _DOCS),
    "gpu_8x_h100": InstanceShape(8, "nvidia-h100", 208, 1800, _DOCS),
}
PERMISSIONS: Final[Mapping[str, Source]] = {}
ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
AGENT_METRIC: Final = Lacks("agent metric", "no stop rule on a metric", Source(_DOCS))
FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}
PREEMPT_OPTION: Final = Lacks("preemption option", "the plane stops the VM by itself", Source(_DOCS))


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    return table_gpus(INSTANCE_TYPES, instance_type)
