"""Provider name (the stack's `provider` output) -> the factory of its control plane.

Provider SDKs are imported only when their factory is called, so using one provider never needs the
others installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from spoteval.clouds.base import ControlPlane, ControlPlaneError, PlaneOptions, StackOutputs

Factory = Callable[[StackOutputs, str, PlaneOptions], ControlPlane]


def _aws(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.aws import AwsPlane

    return AwsPlane.connect(outputs, node, options)


def _gcp(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.gcp import GcpPlane

    return GcpPlane.connect(outputs, node, options)


def _azure(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.azure import AzurePlane

    return AzurePlane.connect(outputs, node, options)


def _kubernetes(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.kubernetes import KubernetesPlane

    return KubernetesPlane.connect(outputs, node, options)


def _nebius(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.nebius import NebiusPlane

    return NebiusPlane.connect(outputs, node, options)


def _runpod(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.runpod import RunpodPlane

    return RunpodPlane.connect(outputs, node, options)


def _group(outputs: StackOutputs, node: str, options: PlaneOptions) -> ControlPlane:
    from spoteval.clouds.groups import AwsGroupPlane, AzureScaleSetPlane, GcpMigPlane

    if outputs.provider == "aws":
        return AwsGroupPlane.connect(outputs, node, options)
    if outputs.provider == "gcp":
        return GcpMigPlane.connect(outputs, node, options)
    return AzureScaleSetPlane.connect(outputs, node, options)


#: provider name (the stack's `provider` output) -> factory
PROVIDERS: Final[dict[str, Factory]] = {
    "aws": _aws,
    "gcp": _gcp,
    "azure": _azure,
    "kubernetes": _kubernetes,
    "k8s": _kubernetes,
    "nebius": _nebius,
    "runpod": _runpod,
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
    from spoteval.clouds.groups import GROUP_PROVIDERS, pool_size

    if pool_size(outputs) > 0 and outputs.provider in GROUP_PROVIDERS:
        if not groups:
            raise ControlPlaneError(
                f"{outputs.provider} node {node!r} is a pool of {pool_size(outputs)}: restarts are "
                "measured on a single-node stack (node.count: 1)"
            )
        return _group(outputs, node, options)
    factory = PROVIDERS.get(outputs.provider)
    if factory is None:
        raise ControlPlaneError(f"no control plane for provider {outputs.provider!r}")
    return factory(outputs, node, options)


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
