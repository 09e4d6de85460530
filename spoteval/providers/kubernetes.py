"""Kubernetes spot node pools: every fact spot-eval relies on, each with its source and the date checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    EventHistory,
    InstanceShape,
    K8sFlavour,
    Lacks,
    PoolScale,
    ProviderFacts,
    Source,
    Toleration,
    cited,
)

KEY: Final = "k8s"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.kubernetes:KubernetesPlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.kubernetes"

_K8S_TERMINATION = "https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"
_K8S_SERVICE = "https://kubernetes.io/docs/concepts/services-networking/service/"
_GKE_SPOT = "https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms"

FACTS: Final = ProviderFacts(
    name="kubernetes",
    key="k8s",
    title="Kubernetes spot node pools (GKE, EKS, AKS, Karpenter, Nebius mk8s)",
    notice_s=None,
    notice_via="SIGTERM to the pod (after preStop), SIGKILL when terminationGracePeriodSeconds ends",
    sigterm_grace_s=15.0,
    metadata=None,
    price=None,
    api_urls={},
    billed_from_boot=False,
    restarts_itself=True,
    can_stay_stopped=False,
    restart="the Job or Deployment controller reschedules the pod elsewhere at once",
    address="a Service's address outlives the pods behind it; a pod's own IP changes",
    default_address="static",
    takes_bid=False,
    markets=("spot", "on_demand"),
    os_poweroff="a pod cannot power off its node; exit and let the Job finish",
    os_poweroff_billed=None,
    api_stop=False,
    sources=cited(
        (
            _K8S_TERMINATION,
            "notice_s notice_via metadata price api_urls billed_from_boot"
            " os_poweroff os_poweroff_billed api_stop",
        ),
        (Source(_GKE_SPOT, note="GKE spot gives user pods 15 s by default, the shortest"), "sigterm_grace_s"),
        (
            "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
            "restarts_itself can_stay_stopped restart",
        ),
        (_K8S_SERVICE, "address default_address"),
        (_GKE_SPOT, "takes_bid markets"),
    ),
)

#: the pod learns of its node's reclaim by SIGTERM only
NOTICES: Final = Lacks("notices", "a pod has no metadata notice: SIGTERM only", Source(_K8S_TERMINATION))
#: a Kubernetes node pool has no price API of its own
PRICE: Final = Lacks(
    "price API",
    "a Kubernetes node pool has no price API of its own: its nodes are priced by the "
    "cloud that runs them (rank that cloud's offers with its stack)",
    Source(_K8S_TERMINATION),
)
CAPACITY_CODES: Final = frozenset[str]()
CAPACITY_SOURCE: Final = None
#: a cluster has no region of its own in the stack config
REGIONS: Final = Lacks("regions", "the cluster is placed by the cloud that runs it", Source(_K8S_SERVICE))
#: a Deployment of N replicas is the pool; it has no provider group engine
POOLS: Final = Lacks(
    "pools",
    "the Deployment's controller keeps the replicas",
    Source("https://kubernetes.io/docs/concepts/workloads/controllers/deployment/"),
)
GROUP_PLANE: Final = ""

POOL_SCALE: Final = PoolScale(
    engine="k8s_deployment",
    url="https://kubernetes.default.svc/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
    method="PATCH",  # application/merge-patch+json {"spec": {"replicas": 0}}
    permissions=("apps/deployments/scale:get,patch",),
    credential="/var/run/secrets/kubernetes.io/serviceaccount/token",
    source=Source(
        "https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/deployment-v1/",
        note="the model server's Deployment scaled to 0 replicas by the agent that finds the run "
        "done; a Role with resourceNames [the Deployment] on deployments/scale: "
        "https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources",
    ),
)

# The Job keeps its ended pods (until the Job is deleted), and a pod the cluster took carries
# the `DisruptionTarget` condition with the reason and its time: a durable record, unlike
# Events, which the API server keeps one hour by default.
EVENTS: Final = EventHistory(
    capture="the DisruptionTarget condition of the Job's pods (kept with the Job)",
    api="core/v1 list namespaced pods (label job-name)",
    interruptions=frozenset(
        {
            "TerminationByKubelet",
            "DeletionByTaintManager",
            "DeletionByPodGC",
            "EvictionByEvictionAPI",
            "PreemptionByScheduler",
        }
    ),
    state_change="",
    stopped_states=frozenset(),
    retention_days=None,
    source=Source(
        "https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions"
    ),
)

#: the nodes are the cluster's: no shapes of its own
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {}


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """None: the node is the cluster's, and its shape is not known here."""
    return None


PERMISSIONS: Final[Mapping[str, Source]] = {}

# --- Kubernetes flavours ------------------------------------------------------------------------

_NEBIUS_PREEMPTIBLE = "https://docs.nebius.com/compute/virtual-machines/preemptible"

K8S_FLAVOURS: Final[Mapping[str, K8sFlavour]] = {
    # GKE graceful node shutdown gives user pods 15 s on a preempted spot node by default.
    "gke": K8sFlavour(
        notice_s=15,
        spot_selector={"cloud.google.com/gke-spot": "true"},
        spot_tolerations=(Toleration("cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"),),
        on_demand_selector={},
        on_demand_absent=("cloud.google.com/gke-spot",),
        gpu_label="cloud.google.com/gke-accelerator",
        source=Source(_GKE_SPOT),
    ),
    # EKS managed node groups drain spot nodes on the 2-minute interruption notice.
    "eks": K8sFlavour(
        notice_s=120,
        spot_selector={"eks.amazonaws.com/capacityType": "SPOT"},
        spot_tolerations=(),
        on_demand_selector={"eks.amazonaws.com/capacityType": "ON_DEMAND"},
        on_demand_absent=(),
        gpu_label=None,
        source=Source("https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html"),
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
        source=Source("https://learn.microsoft.com/azure/aks/spot-node-pool"),
    ),
    # Karpenter on AWS drains on the 2-minute interruption notice (interruption queue configured).
    "karpenter": K8sFlavour(
        notice_s=120,
        spot_selector={"karpenter.sh/capacity-type": "spot"},
        spot_tolerations=(),
        on_demand_selector={"karpenter.sh/capacity-type": "on-demand"},
        on_demand_absent=(),
        gpu_label=None,
        source=Source("https://karpenter.sh/docs/concepts/disruption/#interruption"),
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
        source=Source(_NEBIUS_PREEMPTIBLE, note="node labels of preemptible node groups: unconfirmed"),
    ),
}

ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
AGENT_METRIC: Final = Lacks("agent metric", "the Job ends the pods", Source(_K8S_TERMINATION))
FLAVOURS: Final = K8S_FLAVOURS

#: a simulated preemption needs no option of the plane
PREEMPT_OPTION: Final = Lacks(
    "preemption option", "the plane simulates a preemption by itself", Source(_K8S_TERMINATION)
)
