"""Every provider spot-eval knows, one fact module each, in one registry.

A provider's module (spoteval/providers/<name>.py) holds every fact the code relies on about it,
each with its `Source` (the documentation page it was checked against and the date): the notice and
how it reaches the node, the instance metadata service, the price API, restart and address
behaviour, the capacity error codes, the region and zone spelling, the pool engine and how a pool
scales to zero, the event history, the instance shapes, the roles and permissions the stacks rely
on, and the modules of its control plane (spoteval/clouds/) and its stack component (components/).

Each module is a `Provider`: mypy checks every module of `REGISTRY` against the protocol, so each
declares every capability, a missing one as a named "none" (`Lacks`: no notices, no event history,
no price API, no pools). `provider(key)` is the one lookup; an unknown key is an error naming the
known ones. The Pulumi side (components/), the node agent (spoteval/agent/) and the control planes
(spoteval/clouds/) all read the facts from here, and docs/providers.md is rendered from them
(`python -m spoteval.provider_notes`). Standard library only: this package ships in the node's agent
bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from spoteval.providers import aws, azure, gcp, kubernetes, nebius, runpod
from spoteval.providers.base import (
    CHECKED,
    FACT_FIELDS,
    STOP_MARGIN_S,
    AgentMetric,
    EventHistory,
    InstanceShape,
    K8sFlavour,
    Lacks,
    Metadata,
    PlaneOption,
    PoolEngine,
    PoolScale,
    PriceApi,
    ProviderFacts,
    Regions,
    Source,
    Toleration,
)


class Provider(Protocol):
    """What every provider's fact module declares (a module is checked against this by mypy)."""

    #: the provider's key in stack config, stack outputs and the agent's config
    @property
    def KEY(self) -> str: ...
    @property
    def FACTS(self) -> ProviderFacts: ...
    #: the metadata service that gives notice of a reclaim, or why there is none (SIGTERM only)
    @property
    def NOTICES(self) -> Metadata | Lacks: ...
    @property
    def PRICE(self) -> PriceApi | Lacks: ...
    #: the provider's error codes of a start that mean no capacity (or quota) now
    @property
    def CAPACITY_CODES(self) -> frozenset[str]: ...
    #: where the capacity codes are documented (None: the provider has none spot-eval reads)
    @property
    def CAPACITY_SOURCE(self) -> Source | None: ...
    @property
    def REGIONS(self) -> Regions | Lacks: ...
    #: the group engine a pool stack declares
    @property
    def POOLS(self) -> PoolEngine | Lacks: ...
    #: how a node scales its own pool to zero
    @property
    def POOL_SCALE(self) -> PoolScale | Lacks: ...
    @property
    def EVENTS(self) -> EventHistory | Lacks: ...
    @property
    def INSTANCE_TYPES(self) -> Mapping[str, InstanceShape]: ...
    #: the facts behind the stop rules and permissions the stacks declare
    @property
    def PERMISSIONS(self) -> Mapping[str, Source]: ...
    #: the provider's roles by use (the node's, the operator's)
    @property
    def ROLES(self) -> Mapping[str, tuple[str, Source]]: ...
    #: the metric the agent publishes for a provider-side idle stop rule
    @property
    def AGENT_METRIC(self) -> AgentMetric | Lacks: ...
    #: how pods land on spot nodes, per managed Kubernetes flavour (empty: not a Kubernetes provider)
    @property
    def FLAVOURS(self) -> Mapping[str, K8sFlavour]: ...
    #: "module:Class" of the control plane of one node (spoteval/clouds/)
    @property
    def PLANE(self) -> str: ...
    #: "module:Class" of the control plane of a pool through its engine ("" without pools)
    @property
    def GROUP_PLANE(self) -> str: ...
    #: the stack component's module (components/)
    @property
    def COMPONENT(self) -> str: ...
    #: the plane option a simulated preemption needs (`--mode preempt`), or its named none
    @property
    def PREEMPT_OPTION(self) -> PlaneOption | Lacks: ...

    def gpus_of(self, instance_type: str, stack_gpu_count: int | None = None) -> int | None:
        """GPUs on one node of an instance type; None when unknown."""
        ...


#: provider key (as stack config, stack outputs and the agent's config spell it) -> its fact module
REGISTRY: Final[dict[str, Provider]] = {
    "aws": aws,
    "gcp": gcp,
    "azure": azure,
    "k8s": kubernetes,
    "nebius": nebius,
    "runpod": runpod,
}


class UnknownProvider(KeyError):
    """A provider key the registry does not hold; the message names the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def unknown(key: str) -> UnknownProvider:
    """The error for a provider key the registry does not hold."""
    return UnknownProvider(f"unknown provider {key!r} (known: {', '.join(REGISTRY)})")


def provider(key: str) -> Provider:
    """The provider registered under `key`; UnknownProvider (a KeyError) names the known ones."""
    found = REGISTRY.get(key)
    if found is None:
        raise unknown(key)
    return found


def registered() -> tuple[Provider, ...]:
    """Every registered provider, in the registry's order (the README's)."""
    return tuple(REGISTRY.values())


AWS: Final = aws.FACTS
GCP: Final = gcp.FACTS
AZURE: Final = azure.FACTS
KUBERNETES: Final = kubernetes.FACTS
NEBIUS: Final = nebius.FACTS
RUNPOD: Final = runpod.FACTS
K8S_FLAVOURS: Final = kubernetes.K8S_FLAVOURS
RUNPOD_NETWORK_VOLUMES: Final = runpod.RUNPOD_NETWORK_VOLUMES
RUNPOD_POD_KEY: Final = runpod.RUNPOD_POD_KEY

#: provider name -> facts
PROVIDERS: Final[Mapping[str, ProviderFacts]] = {p.FACTS.name: p.FACTS for p in REGISTRY.values()}
#: provider key -> facts
BY_KEY: Final[Mapping[str, ProviderFacts]] = {key: p.FACTS for key, p in REGISTRY.items()}
#: the keys, in the order the README lists them
KEYS: Final = tuple(BY_KEY)
#: providers whose node runs the VM startup script (a metadata service tells it who it is)
VM_KEYS: Final = tuple(p.key for p in PROVIDERS.values() if p.metadata is not None)
#: billing starts at the node's boot on these (the key spelling)
BILLED_FROM_BOOT: Final = frozenset(p.key for p in PROVIDERS.values() if p.billed_from_boot)


def facts(name: str) -> ProviderFacts:
    """The facts of a provider by key, or by its long name ("kubernetes" for "k8s"); UnknownProvider
    (a KeyError) names the known ones."""
    found = BY_KEY.get(name) or PROVIDERS.get(name)
    if found is None:
        raise unknown(name)
    return found


__all__ = [
    "AWS",
    "AZURE",
    "BILLED_FROM_BOOT",
    "BY_KEY",
    "CHECKED",
    "FACT_FIELDS",
    "GCP",
    "K8S_FLAVOURS",
    "KEYS",
    "KUBERNETES",
    "NEBIUS",
    "PROVIDERS",
    "REGISTRY",
    "RUNPOD",
    "RUNPOD_NETWORK_VOLUMES",
    "RUNPOD_POD_KEY",
    "STOP_MARGIN_S",
    "VM_KEYS",
    "AgentMetric",
    "EventHistory",
    "InstanceShape",
    "K8sFlavour",
    "Lacks",
    "Metadata",
    "PlaneOption",
    "PoolEngine",
    "PoolScale",
    "PriceApi",
    "Provider",
    "ProviderFacts",
    "Regions",
    "Source",
    "Toleration",
    "UnknownProvider",
    "facts",
    "provider",
    "registered",
    "unknown",
]
