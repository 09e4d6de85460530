"""Azure Spot VMs: every fact spot-eval relies on, each with its source and the date checked."""

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

KEY: Final = "azure"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.azure:AzurePlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.azure"

_AZ_EVENTS = "https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events"
_AZ_SPOT = "https://learn.microsoft.com/azure/virtual-machines/spot-vms"
_AZ_IMDS = "https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service"
_AZ_PRICE = "https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices"
_AZ_ADDRESS = "https://learn.microsoft.com/azure/virtual-network/ip-services/public-ip-addresses"
_AZ_STATES = "https://learn.microsoft.com/azure/virtual-machines/states-billing"

METADATA: Final = Metadata(
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
)

PRICE: Final = PriceApi(
    url="https://prices.azure.com/api/retail/prices",
    version="2023-01-01-preview",
    auth="none",
    node_markets=frozenset({"spot", "on_demand"}),
)

FACTS: Final = ProviderFacts(
    name="azure",
    key="azure",
    title="Azure Spot VM",
    notice_s=30,
    notice_via="Scheduled Events poll (every 1 s): a Preempt event with its NotBefore; acknowledged by POST",
    sigterm_grace_s=30.0,
    metadata=METADATA,
    price=PRICE,
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
    sources=cited(
        (_AZ_EVENTS, "notice_s notice_via"),
        (_AZ_STATES, "sigterm_grace_s billed_from_boot os_poweroff os_poweroff_billed api_stop"),
        (_AZ_IMDS, "metadata"),
        (_AZ_PRICE, "price api_urls"),
        (_AZ_SPOT, "restarts_itself can_stay_stopped restart takes_bid markets"),
        (_AZ_ADDRESS, "address default_address"),
    ),
)

#: the notice comes from Scheduled Events on the instance metadata service
NOTICES: Final = METADATA

#: ARM error codes of a VM start that mean no capacity (or quota) now: worth retrying later
CAPACITY_CODES: Final = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "SkuNotAvailable",
        "OperationNotAllowed",
    }
)
CAPACITY_SOURCE: Final = Source(
    "https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/windows/allocation-failure",
    note="and https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/"
    "error-sku-not-available",
)

REGIONS: Final = Regions(
    region=r"^[a-z]+[a-z0-9]*$",
    zone_suffix="",
    zones=("1", "2", "3"),
    source=Source(
        "https://learn.microsoft.com/azure/reliability/availability-zones-overview",
        note="a region with zones has three logical zones, 1, 2 and 3, mapped per subscription",
    ),
)

POOLS: Final = PoolEngine(
    "Spot virtual machine scale set",
    False,
    frozenset({"PowerState/running"}),
    Source(
        "https://learn.microsoft.com/azure/virtual-machine-scale-sets/use-spot",
        note="with eviction policy Delete the evicted members are deleted; Spot try & restore "
        "(spotRestorePolicy.restoreTimeout) brings them back only within its window; whether the "
        "capacity itself drops on eviction is not confirmed, so the operator sets it back",
    ),
)
GROUP_PLANE: Final = "spoteval.clouds.groups:AzureScaleSetPlane"

POOL_SCALE: Final = PoolScale(
    engine="azure_vmss",
    url="https://management.azure.com/subscriptions/{subscription}/resourceGroups/{resource_group}"
    "/providers/Microsoft.Compute/virtualMachineScaleSets/{name}?api-version=2024-07-01",
    method="PATCH",  # body {"sku": {"capacity": 0}}
    permissions=(
        "Microsoft.Compute/virtualMachineScaleSets/read",
        "Microsoft.Compute/virtualMachineScaleSets/write",
    ),
    credential="identity_token",
    api_version="2024-07-01",
    identity="compute_json",
    source=Source(
        "https://learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/update",
        note="a custom role with these actions assigned at the scale set's own id",
    ),
)

_LIST = "https://learn.microsoft.com/rest/api/monitor/activitylogs/list"
_RETENTION = "https://learn.microsoft.com/azure/azure-monitor/essentials/activity-log"

# The Activity Log of the resource group, 90 days. The operation name of a platform eviction is
# reported by users (AzureActivity tables, az monitor activity-log) but not documented by Microsoft.
EVENTS: Final = EventHistory(
    capture="the Activity Log of the stack's resource group (Azure keeps it 90 days)",
    api="Microsoft.Insights/eventtypes/management/values (api-version 2015-04-01)",
    interruptions=frozenset(
        {
            "Microsoft.Compute/virtualMachines/evictSpotVM/action",
            "Microsoft.Compute/virtualMachineScaleSets/evictSpotVM/action",
        }
    ),
    state_change="",
    stopped_states=frozenset(),
    retention_days=90,
    source=Source(_LIST, note=f"retention: {_RETENTION}"),
    names_source=Source(
        _LIST, note="evictSpotVM operation names: unconfirmed (users' reports, not Microsoft's docs)"
    ),
    endpoint="https://management.azure.com/subscriptions/{subscription}/providers/"
    "Microsoft.Insights/eventtypes/management/values",
)

_T4: Final = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series"

#: GPUs, vCPUs and memory per VM size
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {
    "Standard_NC4as_T4_v3": InstanceShape(1, "nvidia-t4", 4, 28, _T4),
    "Standard_NC8as_T4_v3": InstanceShape(1, "nvidia-t4", 8, 56, _T4),
    "Standard_NC16as_T4_v3": InstanceShape(1, "nvidia-t4", 16, 110, _T4),
    "Standard_NC64as_T4_v3": InstanceShape(4, "nvidia-t4", 64, 440, _T4),
}


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs on one node of this VM size (the table); None when unknown."""
    return table_gpus(INSTANCE_TYPES, instance_type)


#: Facts behind the stop rules and permissions the stacks declare, each with its page
PERMISSIONS: Final[Mapping[str, Source]] = {
    "azure_abac_blob_path": Source(
        "https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes",
        note="role assignment conditions (version 2.0) on blobs:path for read/write/add and on the "
        "blobs:prefix request attribute for Blob.List; no attribute for If-None-Match",
    ),
    "azure_no_provider_stop": Source(
        "https://learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm",
        note="auto-shutdown (Microsoft.DevTestLab/schedules shutdown-computevm-VM) deallocates at "
        "a daily time of day; Azure offers no built-in stop on a metric or after a run time",
    ),
}

ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}
AGENT_METRIC: Final = Lacks(
    "agent metric",
    "Azure offers no built-in stop on a metric",
    Source("https://learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm"),
)

#: a simulated preemption needs no option of the plane
PREEMPT_OPTION: Final = Lacks(
    "preemption option", "the plane simulates a preemption by itself", Source(_AZ_SPOT)
)
