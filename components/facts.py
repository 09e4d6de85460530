"""Provider facts the Pulumi side depends on, kept in one place (see PROVIDERS.md; recheck them
against each provider's current documentation before relying on them).

Notice periods decide how long the node agent's service may take to stop (systemd `TimeoutStopSec`
on VMs, `terminationGracePeriodSeconds` on Kubernetes): always a few seconds inside the notice, so
the agent's own SIGTERM handling finishes before the provider pulls the plug.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: provider key (as used in stack config, outputs and the agent config) -> Pulumi module name
PROVIDERS: Final = ("aws", "gcp", "azure", "k8s", "nebius", "runpod")

MARKETS: Final = ("spot", "on_demand")

#: seconds kept between the end of the agent's stop window and the provider's hard stop
STOP_MARGIN_S: Final = 5


@dataclass(frozen=True)
class VmFacts:
    """What the startup script needs to know about a VM provider."""

    notice_s: int  # notice before the capacity is taken back
    metadata_url: str  # base URL of the instance metadata service (the agent's `metadata_url`)
    price_api: bool  # True when the agent can read the price in force itself (else configured)

    @property
    def stop_timeout_s(self) -> int:
        return max(STOP_MARGIN_S, self.notice_s - STOP_MARGIN_S)


VM_FACTS: Final[Mapping[str, VmFacts]] = {
    # 2-minute interruption notice via IMDSv2; price from DescribeSpotPriceHistory.
    "aws": VmFacts(notice_s=120, metadata_url="http://169.254.169.254", price_api=True),
    # 30 s from the preempted flag to ACPI soft off (hard off 30 s later); price needs an API key.
    "gcp": VmFacts(notice_s=30, metadata_url="http://metadata.google.internal", price_api=False),
    # Scheduled Events `Preempt` at least 30 s ahead; retail prices API needs no authentication.
    "azure": VmFacts(notice_s=30, metadata_url="http://169.254.169.254", price_api=True),
    # SIGTERM 60 s before a preemptible VM stops; no notice endpoint; the spot price needs the SDK.
    "nebius": VmFacts(notice_s=60, metadata_url="http://metadata.nebius.internal", price_api=False),
}


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str | None
    effect: str


@dataclass(frozen=True)
class K8sFlavour:
    """How pods land on spot (or on-demand) nodes of one managed Kubernetes flavour."""

    notice_s: int  # what a pod gets between SIGTERM and SIGKILL when its spot node goes away
    spot_selector: Mapping[str, str]
    spot_tolerations: tuple[Toleration, ...]
    on_demand_selector: Mapping[str, str]
    #: node labels that must be absent on on-demand nodes (node affinity DoesNotExist)
    on_demand_absent: tuple[str, ...]
    #: label naming the GPU model, when the flavour has one
    gpu_label: str | None

    @property
    def grace_s(self) -> int:
        return max(STOP_MARGIN_S, self.notice_s - STOP_MARGIN_S)


K8S_FLAVOURS: Final[Mapping[str, K8sFlavour]] = {
    # GKE graceful node shutdown gives user pods 15 s on a preempted spot node by default.
    "gke": K8sFlavour(
        notice_s=15,
        spot_selector={"cloud.google.com/gke-spot": "true"},
        spot_tolerations=(Toleration("cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"),),
        on_demand_selector={},
        on_demand_absent=("cloud.google.com/gke-spot",),
        gpu_label="cloud.google.com/gke-accelerator",
    ),
    # EKS managed node groups drain spot nodes on the 2-minute interruption notice.
    "eks": K8sFlavour(
        notice_s=120,
        spot_selector={"eks.amazonaws.com/capacityType": "SPOT"},
        spot_tolerations=(),
        on_demand_selector={"eks.amazonaws.com/capacityType": "ON_DEMAND"},
        on_demand_absent=(),
        gpu_label=None,
    ),
    # AKS spot pools carry a NoSchedule taint; eviction notice is 30 s.
    "aks": K8sFlavour(
        notice_s=30,
        spot_selector={"kubernetes.azure.com/scalesetpriority": "spot"},
        spot_tolerations=(
            Toleration("kubernetes.azure.com/scalesetpriority", "Equal", "spot", "NoSchedule"),
        ),
        on_demand_selector={},
        on_demand_absent=("kubernetes.azure.com/scalesetpriority",),
        gpu_label=None,
    ),
    # Karpenter on AWS drains on the 2-minute interruption notice (interruption queue configured).
    "karpenter": K8sFlavour(
        notice_s=120,
        spot_selector={"karpenter.sh/capacity-type": "spot"},
        spot_tolerations=(),
        on_demand_selector={"karpenter.sh/capacity-type": "on-demand"},
        on_demand_absent=(),
        gpu_label=None,
    ),
    # Nebius preemptible VMs: SIGTERM 60 s before stop. Node labels of preemptible node groups are
    # not documented [unconfirmed], so the stack must give `k8s.node_selector` itself.
    "nebius": K8sFlavour(
        notice_s=60,
        spot_selector={},
        spot_tolerations=(),
        on_demand_selector={},
        on_demand_absent=(),
        gpu_label=None,
    ),
}
