"""Every provider fact the code relies on, one entry per provider, each with its source and date.

Notice lengths and how a notice reaches the node, instance metadata URLs and headers, price API
endpoints, whether billing runs from boot, restart semantics, address behaviour and the Kubernetes
flavours: the Pulumi side (components/), the node agent (spoteval/agent/) and the control planes
(spoteval/clouds/) all read them from here. Standard library only: this module ships in the node's
agent bundle.

Each fact has a `Source` (the documentation page it was checked against and the date). Providers
change these over time: recheck the page before relying on a fact, and update the date with it.
docs/providers.md tells users the same facts in prose (a test keeps the two in step). The facts
behind the stacks' stop rules and the node's permissions are in spoteval/provider_rules.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

#: the date every fact below was last checked against its source
CHECKED: Final = "2026-12-01"

#: seconds kept between the end of the agent's stop window and the provider's hard stop, so the
#: agent's own SIGTERM handling finishes inside the notice (a project choice, not a provider fact)
STOP_MARGIN_S: Final = 5


@dataclass(frozen=True)
class Source:
    """Where a fact was checked, and when."""

    url: str
    checked: str = CHECKED
    note: str = ""


@dataclass(frozen=True)
class Metadata:
    """The instance metadata service as seen from the node."""

    base_url: str
    #: headers every read must carry (the service refuses requests without them)
    headers: Mapping[str, str]
    #: named paths under `base_url` (query strings included where the service needs a version)
    paths: Mapping[str, str]
    #: seconds between the agent's notice polls (a long poll's timeout on GCP); None: no notice here
    poll_s: float | None = None
    #: IMDSv2 session tokens (AWS): the header that asks for one (with its TTL) and the one that sends it
    token_ttl_header: str | None = None
    token_header: str | None = None
    #: longest token lifetime the service grants, in seconds
    token_ttl_max_s: int | None = None
    #: event types that take the VM (Azure Scheduled Events)
    stopping_events: frozenset[str] = frozenset()
    #: seconds between a host-maintenance notice and the maintenance (GCP `maintenance-event`)
    maintenance_notice_s: int | None = None

    def url(self, name: str) -> str:
        return self.base_url + self.paths[name]


@dataclass(frozen=True)
class PriceApi:
    """Where the price in force is read."""

    #: the endpoint (a format string with `{region}` where the endpoint is regional); None: SDK only
    url: str | None
    #: API version the code speaks
    version: str | None
    #: what a caller needs: "none", "instance role", "API key", "account credentials"
    auth: str
    #: markets on which the node reads its own price with the standard library (else configured)
    node_markets: frozenset[str] = frozenset()
    #: further names the query needs (GCP: the Compute Engine service of the billing catalog)
    names: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderFacts:
    """One provider's facts. Every field after `title` is a fact with an entry in `sources`."""

    name: str  # "aws", "gcp", "azure", "kubernetes", "nebius", "runpod"
    #: the provider's key in stack config, stack outputs and the agent's config ("k8s" for kubernetes)
    key: str
    title: str
    #: seconds of notice before the capacity is taken back (None: per Kubernetes flavour)
    notice_s: int | None
    #: how the notice reaches the node
    notice_via: str
    #: seconds from SIGTERM to SIGKILL the agent assumes (conservative)
    sigterm_grace_s: float
    metadata: Metadata | None
    price: PriceApi | None
    #: other endpoints of the provider's API the code calls
    api_urls: Mapping[str, str]
    #: the bill runs from the node's boot (VMs), not from when the workload starts
    billed_from_boot: bool
    #: the provider brings a node back by itself after a preemption (AWS persistent requests,
    #: Kubernetes controllers)
    restarts_itself: bool
    #: a stopped node stays stopped (False: a controller replaces it at once)
    can_stay_stopped: bool
    #: what happens after a reclaim, and how the node comes back
    restart: str
    #: what happens to the node's address across stop and start
    address: str
    #: the address kind a single node gets when the stack does not say ("ephemeral" | "static")
    default_address: str
    #: the spot market takes a price bid the stack declares (in USD)
    takes_bid: bool
    #: markets a stack may declare
    markets: tuple[str, ...]
    #: why powering off from inside the OS does not stop this node (None: it does)
    os_poweroff: str | None
    #: powering off from inside the OS stops the node but leaves it billed (None: it does not)
    os_poweroff_billed: str | None
    #: the node is stopped through the provider's API from inside (`on_done: api_stop`)
    api_stop: bool
    sources: Mapping[str, Source]

    def source(self, fact: str) -> Source:
        return self.sources[fact]

    def market_refusal(self, market: str) -> str:
        """Why a stack cannot declare `market` here, in one line with the source and its date."""
        s = self.sources["markets"]
        why = f"{s.note}; {s.url}, checked {s.checked}"
        use = " or ".join(self.markets)
        return f"{self.name} offers no {market} capacity through its API ({why}): use {use}"

    @property
    def stop_timeout_s(self) -> int:
        """Seconds the agent's service gets between SIGTERM and SIGKILL: inside the notice."""
        if self.notice_s is None:
            raise ValueError(f"{self.name}: the notice depends on the Kubernetes flavour")
        return max(STOP_MARGIN_S, self.notice_s - STOP_MARGIN_S)


#: the fields of ProviderFacts that are facts (each needs a source)
FACT_FIELDS: Final = tuple(
    f.name for f in fields(ProviderFacts) if f.name not in ("name", "key", "title", "sources")
)


def _cited(*groups: tuple[str | Source, str]) -> dict[str, Source]:
    """Sources by fact: each group is (a page or a Source, the names of the facts checked there)."""
    return {
        fact: page if isinstance(page, Source) else Source(page)
        for page, facts in groups
        for fact in facts.split()
    }


_AWS_SPOT = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
_AWS_IMDS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html"
_AWS_BEHAVIOUR = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/interruption-behavior.html"
_AWS_PRICE = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html"
_AWS_ADDRESS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html"
_AWS_BILLING = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html"
_AWS_SHUTDOWN = (
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html"
)

AWS: Final = ProviderFacts(
    name="aws",
    key="aws",
    title="AWS EC2 Spot",
    notice_s=120,
    notice_via="IMDSv2 poll of spot/instance-action (every 5 s); earlier hint: rebalance recommendation",
    sigterm_grace_s=30.0,
    metadata=Metadata(
        base_url="http://169.254.169.254",
        headers={},
        paths={
            "token": "/latest/api/token",
            "instance_action": "/latest/meta-data/spot/instance-action",
            "rebalance": "/latest/meta-data/events/recommendations/rebalance",
            "instance_id": "/latest/meta-data/instance-id",
            "zone": "/latest/meta-data/placement/availability-zone",
            "credentials": "/latest/meta-data/iam/security-credentials/",
        },
        poll_s=5.0,
        token_ttl_header="X-aws-ec2-metadata-token-ttl-seconds",
        token_header="X-aws-ec2-metadata-token",
        token_ttl_max_s=21600,
    ),
    price=PriceApi(
        url="https://ec2.{region}.amazonaws.com/",
        version="2016-11-15",
        auth="instance role (DescribeSpotPriceHistory, Signature Version 4)",
        node_markets=frozenset({"spot"}),
    ),
    api_urls={},
    billed_from_boot=True,
    restarts_itself=True,
    can_stay_stopped=True,
    restart="a persistent request with interruption behaviour stop: the instance is stopped, EBS kept, "
    "and EC2 starts it again when capacity returns; a user may stop and start it too",
    address="the public IPv4 address is released on stop and a new one given on start; the private "
    "address is kept; an Elastic IP stays",
    default_address="ephemeral",
    takes_bid=True,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed=None,
    api_stop=False,
    sources=_cited(
        (_AWS_SPOT, "notice_s notice_via"),
        (Source(_AWS_SHUTDOWN, note="the agent's assumption for an OS shutdown"), "sigterm_grace_s"),
        (_AWS_IMDS, "metadata"),
        (_AWS_PRICE, "price api_urls"),
        (_AWS_BILLING, "billed_from_boot"),
        (_AWS_BEHAVIOUR, "restarts_itself can_stay_stopped restart"),
        (_AWS_ADDRESS, "address default_address"),
        (
            "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-instances.html",
            "takes_bid markets",
        ),
        (_AWS_SHUTDOWN, "os_poweroff os_poweroff_billed api_stop"),
    ),
)

_GCP_SPOT = "https://cloud.google.com/compute/docs/instances/spot"
_GCP_DETECT = "https://cloud.google.com/compute/docs/instances/create-use-spot#detect-preemption"
_GCP_METADATA = "https://cloud.google.com/compute/docs/metadata/querying-metadata"
_GCP_PRICE = "https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list"
_GCP_ADDRESS = "https://cloud.google.com/compute/docs/ip-addresses#ephemeraladdress"
_GCP_BILLING = "https://cloud.google.com/compute/docs/instances/instance-life-cycle"

GCP: Final = ProviderFacts(
    name="gcp",
    key="gcp",
    title="GCP Spot VM",
    notice_s=30,
    notice_via="metadata long poll of instance/preempted (TRUE on preemption); then ACPI soft off, "
    "hard off 30 s later; the shutdown-script runs best effort. Host maintenance of a GPU VM "
    "(no live migration): instance/maintenance-event reads TERMINATE_ON_HOST_MAINTENANCE 60 s before "
    "(https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice)",
    sigterm_grace_s=30.0,
    metadata=Metadata(
        base_url="http://metadata.google.internal",
        headers={"Metadata-Flavor": "Google"},
        paths={
            "preempted": "/computeMetadata/v1/instance/preempted",
            "maintenance_event": "/computeMetadata/v1/instance/maintenance-event",
            "instance": "/computeMetadata/v1/instance/",
            "token": "/computeMetadata/v1/instance/service-accounts/default/token",
        },
        poll_s=60.0,
        maintenance_notice_s=60,
    ),
    price=PriceApi(
        url="https://cloudbilling.googleapis.com/v1",
        version="v1",
        auth="API key",
        names={"compute_service": "services/6F81-5844-456A"},
    ),
    api_urls={},
    billed_from_boot=True,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="instanceTerminationAction STOP keeps the disks and leaves the VM TERMINATED; the user "
    "(or spot-eval's control plane) starts it again",
    address="an ephemeral external address changes on every start; reserve a static address to keep one",
    default_address="ephemeral",
    takes_bid=False,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed=None,
    api_stop=False,
    sources=_cited(
        (_GCP_SPOT, "notice_s sigterm_grace_s restarts_itself can_stay_stopped restart takes_bid markets"),
        (_GCP_DETECT, "notice_via"),
        (_GCP_METADATA, "metadata"),
        (_GCP_PRICE, "price api_urls"),
        (_GCP_BILLING, "billed_from_boot os_poweroff os_poweroff_billed api_stop"),
        (_GCP_ADDRESS, "address default_address"),
    ),
)

_AZ_EVENTS = "https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events"
_AZ_SPOT = "https://learn.microsoft.com/azure/virtual-machines/spot-vms"
_AZ_IMDS = "https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service"
_AZ_PRICE = "https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices"
_AZ_ADDRESS = "https://learn.microsoft.com/azure/virtual-network/ip-services/public-ip-addresses"
_AZ_STATES = "https://learn.microsoft.com/azure/virtual-machines/states-billing"

AZURE: Final = ProviderFacts(
    name="azure",
    key="azure",
    title="Azure Spot VM",
    notice_s=30,
    notice_via="Scheduled Events poll (every 1 s): a Preempt event with its NotBefore; acknowledged by POST",
    sigterm_grace_s=30.0,
    metadata=Metadata(
        base_url="http://169.254.169.254",
        headers={"Metadata": "true"},
        paths={
            "scheduled_events": "/metadata/scheduledevents?api-version=2020-07-01",
            "compute": "/metadata/instance/compute/",
            "text_query": "?api-version=2021-02-01&format=text",
            "identity_token": "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://management.azure.com/",
            "compute_json": "/metadata/instance/compute?api-version=2021-02-01",
        },
        poll_s=1.0,
        stopping_events=frozenset({"Preempt", "Terminate", "Reboot", "Redeploy"}),
    ),
    price=PriceApi(
        url="https://prices.azure.com/api/retail/prices",
        version="2023-01-01-preview",
        auth="none",
        node_markets=frozenset({"spot", "on_demand"}),
    ),
    api_urls={},
    billed_from_boot=True,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="evictionPolicy Deallocate keeps the disks (billed); the user restarts the VM at the current "
    "price when capacity exists and the max price allows it",
    address="a dynamic public IP can change on restart; a Standard public IP is static",
    default_address="static",
    takes_bid=True,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed="poweroff from inside the OS leaves an Azure VM allocated and billed",
    api_stop=False,
    sources=_cited(
        (_AZ_EVENTS, "notice_s notice_via"),
        (_AZ_STATES, "sigterm_grace_s billed_from_boot os_poweroff os_poweroff_billed api_stop"),
        (_AZ_IMDS, "metadata"),
        (_AZ_PRICE, "price api_urls"),
        (_AZ_SPOT, "restarts_itself can_stay_stopped restart takes_bid markets"),
        (_AZ_ADDRESS, "address default_address"),
    ),
)

_K8S_TERMINATION = "https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"
_K8S_SERVICE = "https://kubernetes.io/docs/concepts/services-networking/service/"
_GKE_SPOT = "https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms"

KUBERNETES: Final = ProviderFacts(
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
    sources=_cited(
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

_NB_PREEMPTIBLE = "https://docs.nebius.com/compute/virtual-machines/preemptible"
_NB_PROTO = "https://github.com/nebius/api/blob/main/nebius/compute/v1/instance.proto"
_NB_METADATA = "https://docs.nebius.com/compute/virtual-machines/metadata"
_NB_TERMS = "https://docs.nebius.com/legal/specific-terms/compute"
_NB_PRICE = "https://github.com/nebius/api/tree/main/nebius/billing/v1alpha1"
_NB_STORAGE = "https://docs.nebius.com/object-storage/interfaces/aws-cli"
_NB_GUEST_SHUTDOWN = Source(
    _NB_PROTO,
    note="recovery_policy FAIL: a guest shutdown stops the VM, not restarted; preemptible.priority: "
    "deprecated 2026-05-11, no effect",
)

NEBIUS: Final = ProviderFacts(
    name="nebius",
    key="nebius",
    title="Nebius preemptible VM",
    notice_s=60,
    notice_via="SIGTERM to the VM's processes 60 s before the stop, then SIGKILL; no metadata notice",
    sigterm_grace_s=60.0,
    metadata=Metadata(
        base_url="http://metadata.nebius.internal",
        headers={"Metadata": "true"},
        paths={"instance_data": "/v1/instance-data", "token": "/v1/iam/sa/token"},
    ),
    price=PriceApi(
        url=None,
        version="billing.v1alpha1 SpotPriceService (gRPC, nebius SDK)",
        auth="account credentials",
    ),
    api_urls={"object_storage": "https://storage.{region}.nebius.cloud"},
    billed_from_boot=True,
    restarts_itself=False,
    can_stay_stopped=True,
    restart="on_preemption STOP only; volumes are kept; the VM is not restarted: someone must start "
    "it through the API; with recovery_policy FAIL a shutdown from inside stops the VM",
    address="a dynamic public IP is released on stop; a static one (or an allocation) stays",
    default_address="ephemeral",
    takes_bid=False,
    markets=("spot", "on_demand"),
    os_poweroff=None,
    os_poweroff_billed=None,
    api_stop=False,
    sources=_cited(
        (
            _NB_PREEMPTIBLE,
            "notice_s notice_via sigterm_grace_s restarts_itself can_stay_stopped"
            " address default_address markets",
        ),
        (_NB_METADATA, "metadata"),
        (_NB_PRICE, "price"),
        (_NB_STORAGE, "api_urls"),
        (_NB_TERMS, "billed_from_boot"),
        (_NB_PROTO, "restart takes_bid"),
        (_NB_GUEST_SHUTDOWN, "os_poweroff os_poweroff_billed api_stop"),
    ),
)


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

RUNPOD: Final = ProviderFacts(
    name="runpod",
    key="runpod",
    title="Runpod on-demand pod",
    notice_s=5,
    notice_via="SIGTERM to the container's main process, SIGKILL 5 s later",
    sigterm_grace_s=5.0,
    metadata=None,
    price=PriceApi(
        url="https://api.runpod.io/v2",
        version="REST v2 (GET /v2/catalog/gpus/{id}: price.secure, price.community per GPU-hour)",
        auth="API key",
    ),
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
    sources=_cited(
        (_RP_PRICING, "notice_s notice_via sigterm_grace_s metadata billed_from_boot"),
        (_RP_V2, "price api_urls restarts_itself can_stay_stopped restart os_poweroff os_poweroff_billed"),
        (RUNPOD_POD_KEY, "api_stop"),
        (_RP_NO_SPOT, "takes_bid markets"),
        (RUNPOD_NETWORK_VOLUMES, "address default_address"),
    ),
)

#: provider name -> facts
PROVIDERS: Final[Mapping[str, ProviderFacts]] = {
    p.name: p for p in (AWS, GCP, AZURE, KUBERNETES, NEBIUS, RUNPOD)
}
#: provider key as stack config, stack outputs and the agent's config spell it -> facts
BY_KEY: Final[Mapping[str, ProviderFacts]] = {p.key: p for p in PROVIDERS.values()}
#: the keys, in the order the README lists them
KEYS: Final = tuple(BY_KEY)
#: providers whose node runs the VM startup script (a metadata service tells it who it is)
VM_KEYS: Final = tuple(p.key for p in PROVIDERS.values() if p.metadata is not None)
#: billing starts at the node's boot on these (the key spelling)
BILLED_FROM_BOOT: Final = frozenset(p.key for p in PROVIDERS.values() if p.billed_from_boot)


def facts(name: str) -> ProviderFacts:
    """The facts of a provider by name or key ("kubernetes" or "k8s"); KeyError names the known ones."""
    found = PROVIDERS.get(name) or BY_KEY.get(name)
    if found is None:
        raise KeyError(f"unknown provider {name!r} (known: {', '.join(PROVIDERS)})")
    return found


# --- Kubernetes flavours ------------------------------------------------------------------------


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
    source: Source = Source(_K8S_TERMINATION)

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
        source=Source(_NB_PREEMPTIBLE, note="node labels of preemptible node groups: unconfirmed"),
    ),
}
