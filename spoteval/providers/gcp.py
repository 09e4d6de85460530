"""GCP Spot VMs: every fact spot-eval relies on, each with its source and the date checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    EventHistory,
    InstanceShape,
    K8sFlavour,
    Lacks,
    Metadata,
    PoolEngine,
    PoolScale,
    PriceApi,
    ProviderFacts,
    Regions,
    Source,
    cited,
    table_gpus,
)

KEY: Final = "gcp"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.gcp:GcpPlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.gcp"

_GCP_SPOT = "https://cloud.google.com/compute/docs/instances/spot"
_GCP_DETECT = "https://cloud.google.com/compute/docs/instances/create-use-spot#detect-preemption"
_GCP_METADATA = "https://cloud.google.com/compute/docs/metadata/querying-metadata"
_GCP_PRICE = "https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list"
_GCP_ADDRESS = "https://cloud.google.com/compute/docs/ip-addresses#ephemeraladdress"
_GCP_BILLING = "https://cloud.google.com/compute/docs/instances/instance-life-cycle"

METADATA: Final = Metadata(
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
)

PRICE: Final = PriceApi(
    url="https://cloudbilling.googleapis.com/v1",
    version="v1",
    auth="API key",
    names={"compute_service": "services/6F81-5844-456A"},
)

FACTS: Final = ProviderFacts(
    name="gcp",
    key="gcp",
    title="GCP Spot VM",
    notice_s=30,
    notice_via="metadata long poll of instance/preempted (TRUE on preemption); then ACPI soft off, "
    "hard off 30 s later; the shutdown-script runs best effort. Host maintenance of a GPU VM "
    "(no live migration): instance/maintenance-event reads TERMINATE_ON_HOST_MAINTENANCE 60 s before "
    "(https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice)",
    sigterm_grace_s=30.0,
    metadata=METADATA,
    price=PRICE,
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
    sources=cited(
        (_GCP_SPOT, "notice_s sigterm_grace_s restarts_itself can_stay_stopped restart takes_bid markets"),
        (_GCP_DETECT, "notice_via"),
        (_GCP_METADATA, "metadata"),
        (_GCP_PRICE, "price api_urls"),
        (_GCP_BILLING, "billed_from_boot os_poweroff os_poweroff_billed api_stop"),
        (_GCP_ADDRESS, "address default_address"),
    ),
)

#: the notice comes from the metadata server (a long poll)
NOTICES: Final = METADATA

#: Operation error codes that mean no capacity (or quota) now: worth retrying later
CAPACITY_CODES: Final = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "QUOTA_EXCEEDED",
        "insufficientCapacity",
        "quotaExceeded",
    }
)
CAPACITY_SOURCE: Final = Source(
    "https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability"
)

REGIONS: Final = Regions(
    region=r"^[a-z]+-[a-z]+\d$",
    zone_suffix=r"-[a-z]",
    zones=(),
    source=Source(
        "https://cloud.google.com/compute/docs/regions-zones",
        note="a zone is its region's name, a dash and a letter (us-central1-a), as Google's examples",
    ),
)

POOLS: Final = PoolEngine(
    "regional managed instance group",
    True,
    frozenset({"RUNNING"}),
    Source(
        "https://cloud.google.com/compute/docs/instance-groups/create-mig-with-preemptible-vms",
        note="the group recreates preempted members when capacity returns",
    ),
)
GROUP_PLANE: Final = "spoteval.clouds.groups:GcpMigPlane"

POOL_SCALE: Final = PoolScale(
    engine="gcp_mig",
    url="https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}"
    "/instanceGroupManagers/{name}/resize?size=0",
    method="POST",
    permissions=("compute.instanceGroupManagers.update",),
    credential="token",
    source=Source(
        "https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize",
        note="a custom role with the permission, bound with an IAM condition on resource.name "
        "(MIGs take no resource-level IAM policy): "
        "https://cloud.google.com/iam/docs/conditions-resource-attributes",
    ),
)

# The stack's log sink routes the system-event audit entries of the run's VMs to a log bucket
# kept 400 days; `protoPayload.resourceName` names the instance, `insertId` is the entry's id.
EVENTS: Final = EventHistory(
    capture="Cloud Logging bucket spot-eval-RUN_ID (a log sink of system-event audit logs)",
    api="logging.entries.list",
    interruptions=frozenset({"compute.instances.preempted"}),
    state_change="",
    stopped_states=frozenset(),
    retention_days=400,
    source=Source("https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list"),
    names_source=Source(_GCP_DETECT),
    endpoint="https://logging.googleapis.com/v2/entries:list",
)

_G2: Final = "https://cloud.google.com/compute/docs/accelerator-optimized-machines#g2-vms"

#: GPUs, vCPUs and memory per machine type (what the Catalog prices a machine type by)
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {
    "g2-standard-8": InstanceShape(1, "nvidia-l4", 8, 32, _G2),
    "g2-standard-12": InstanceShape(1, "nvidia-l4", 12, 48, _G2),
    "g2-standard-24": InstanceShape(2, "nvidia-l4", 24, 96, _G2),
}


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs on one node of this machine type (the table); None when unknown."""
    return table_gpus(INSTANCE_TYPES, instance_type)


#: Facts behind the stop rules and permissions the stacks declare, each with its page
PERMISSIONS: Final[Mapping[str, Source]] = {
    "gcp_budget_project_number": Source(
        "https://www.pulumi.com/registry/packages/gcp/api-docs/billing/budget/",
        note="budget_filter.projects takes projects/{project_number} (the project id is refused); "
        "organizations.get_project reads the number",
    ),
    "gcs_condition_resource_name": Source(
        "https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name",
        note="Cloud Storage objects are projects/_/buckets/BUCKET/objects/NAME; a listing is "
        "checked against the bucket (resource.type storage.googleapis.com/Bucket); uniform "
        "bucket-level access is required",
    ),
    "gcs_object_creator_no_overwrite": Source(
        "https://cloud.google.com/storage/docs/access-control/iam-roles",
        note="roles/storage.objectCreator has storage.objects.create without storage.objects.delete, "
        "which replacing an existing object needs",
    ),
}

ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}
AGENT_METRIC: Final = Lacks("agent metric", "no idle stop rule on a metric", Source(_GCP_BILLING))

#: a simulated preemption needs no option of the plane
PREEMPT_OPTION: Final = Lacks(
    "preemption option", "the plane simulates a preemption by itself", Source(_GCP_SPOT)
)
