"""Provider (the stack's `provider` output) -> its control plane, as its fact module names it
(`PLANE`, `GROUP_PLANE` in spoteval/providers/); the readers of the events its stack keeps sit
above the planes, in spoteval/events/readers.py.

Provider SDKs are imported only when a plane is opened, so using one provider never needs the
others installed. An unknown provider is a ControlPlaneError naming the known ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final, Protocol, runtime_checkable

from spoteval.clouds.base import ControlPlane, ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.providers import Provider, UnknownProvider, facts, provider, registered

Factory = Callable[[StackOutputs, str, PlaneOptions], ControlPlane]


@runtime_checkable
class Connects(Protocol):
    """A control plane class: `connect` opens one node's plane of a stack."""

    def connect(self, outputs: StackOutputs, node: str, config: PlaneOptions) -> ControlPlane: ...


def _load(path: str) -> Connects:
    """The control plane class at "module:Class" (a provider's `PLANE` or `GROUP_PLANE`)."""
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, Connects):
        raise TypeError(f"{path} has no connect(outputs, node, options)")
    return found


def _factory(path: str) -> Factory:
    def connect(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
        return _load(path).connect(outputs, node, options)

    return connect


def _provider(name: str) -> Provider:
    """The provider of a stack's `provider` output (its key, or its long name: "kubernetes")."""
    return provider(facts(name).key)


#: provider name and key (the stack's `provider` output) -> factory of its single-node plane
PROVIDERS: Final[dict[str, Factory]] = {
    spelling: factory
    for p, factory in ((p, _factory(p.PLANE)) for p in registered())
    for spelling in (p.KEY, p.FACTS.name)
}


def open_plane(
    outputs: StackOutputs, node: str, options: PlaneOptions, *, groups: bool = False
) -> ControlPlane:
    """The control plane for one node of the stack. A pool stack's node id is its group (an Auto
    Scaling group, a scale set): with `groups` (the operator) its plane drives the group through the
    provider's engine (spoteval/clouds/groups.py); without (the restart measurement) it is refused,
    since restarts are measured on a single node."""
    if node not in outputs.node_ids:
        raise ControlPlaneError(
            f"node {node!r} is not among the stack's node_ids ({', '.join(outputs.node_ids)})"
        )
    try:
        found = _provider(outputs.provider)
    except UnknownProvider as exc:
        raise ControlPlaneError(str(exc)) from None
    from spoteval.clouds.groups import pool_size

    if pool_size(outputs) > 0 and found.GROUP_PLANE:
        if not groups:
            raise ControlPlaneError(
                f"{outputs.provider} node {node!r} is a pool of {pool_size(outputs)}: restarts are "
                "measured on a single-node stack (node.count: 1)"
            )
        return _load(found.GROUP_PLANE).connect(outputs, node, options)
    return _load(found.PLANE).connect(outputs, node, options)


#: The flat option names of the restart measurement's command line -> (provider, the option's key
#: in that provider's block). Only `PlaneConfig` reads this; a plane reads its own block.
_FLAT_OPTIONS: Final = {
    "fis_template_id": ("aws", "fis_template_id"),
    "gcp_billing_api_key": ("gcp", "billing_api_key"),
    "gcp_project": ("gcp", "project"),
    "azure_subscription": ("azure", "subscription"),
    "azure_resource_group": ("azure", "resource_group"),
    "k8s_namespace": ("kubernetes", "namespace"),
    "k8s_deployment": ("kubernetes", "deployment"),
}


def PlaneConfig(
    *,
    configured_price: float | None = None,
    currency: str = "USD",
    poll_s: float = 5.0,
    **flat: str | None,
) -> PlaneOptions:
    """`PlaneOptions` from the flat keywords the measurement's command line fills
    (`fis_template_id`, `gcp_project`, `azure_resource_group`, `k8s_namespace`, ...): each value goes
    to the block of the provider it names; `None` values are left out."""
    providers: dict[str, dict[str, str]] = {}
    for key, value in flat.items():
        if key not in _FLAT_OPTIONS:
            known = ", ".join(sorted(_FLAT_OPTIONS))
            raise TypeError(f"PlaneConfig: unknown option {key!r} (known: {known})")
        if value is not None:
            provider, name = _FLAT_OPTIONS[key]
            providers.setdefault(provider, {})[name] = value
    return PlaneOptions(configured_price, currency, poll_s, providers)
