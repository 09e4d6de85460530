"""A stack's declarations as a reviewer reads them: the key properties of each resource type, as text
(a tree of components) or as one JSON object. `python -m scripts.plan` prints them for a stack
rendered under the mock engine (components/mocks.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from components.mocks import Declared, Rendered, engine_id

#: the types of a weights-cache disk (a hold), which a node attaches by naming its id
DISK_TYPES: Final = frozenset(
    {
        "aws:ebs/volume:Volume",
        "gcp:compute/disk:Disk",
        "azure-native:compute:Disk",
        "nebius:index/computeV1Disk:ComputeV1Disk",
        "kubernetes:core/v1:PersistentVolumeClaim",
        "pulumi-python:dynamic:Resource",
    }
)

#: type token -> input properties (engine names, dotted paths) worth a reviewer's eye
KEY_PROPERTIES: Final[Mapping[str, tuple[str, ...]]] = {
    "pulumi:providers:aws": ("region",),
    "pulumi:providers:gcp": ("project", "region", "zone"),
    "pulumi:providers:azure-native": ("location",),
    "pulumi:providers:kubernetes": ("context", "namespace"),
    "aws:s3/bucket:Bucket": ("forceDestroy",),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        "blockPublicAcls",
        "blockPublicPolicy",
        "ignorePublicAcls",
        "restrictPublicBuckets",
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": ("rule.objectOwnership",),
    "aws:s3/bucketVersioning:BucketVersioning": ("versioningConfiguration.status",),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "rules.0.applyServerSideEncryptionByDefault.sseAlgorithm",
    ),
    "aws:s3/bucketObjectv2:BucketObjectv2": ("key",),
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/role:Role": ("assumeRolePolicy",),
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("availabilityZone", "cidrBlock"),
    "aws:ec2/securityGroup:SecurityGroup": ("ingress",),
    "aws:ebs/volume:Volume": ("availabilityZone", "size", "type", "encrypted"),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "imageId",
        "metadataOptions.httpTokens",
        "instanceInitiatedShutdownBehavior",
    ),
    "aws:ec2/instance:Instance": (
        "instanceType",
        "instanceMarketOptions",
        "instanceInitiatedShutdownBehavior",
        "metadataOptions.httpTokens",
        "rootBlockDevice.volumeSize",
        "userData",
    ),
    "aws:ec2/volumeAttachment:VolumeAttachment": ("deviceName", "stopInstanceBeforeDetaching"),
    "aws:ec2/eip:Eip": ("domain",),
    "aws:autoscaling/group:Group": ("desiredCapacity", "capacityRebalance", "mixedInstancesPolicy"),
    "aws:autoscaling/schedule:Schedule": ("startTime", "desiredCapacity"),
    "aws:scheduler/schedule:Schedule": ("scheduleExpression", "target.arn", "target.input"),
    "aws:cloudwatch/metricAlarm:MetricAlarm": (
        "metricName",
        "threshold",
        "period",
        "evaluationPeriods",
        "alarmActions",
    ),
    "aws:budgets/budget:Budget": ("limitAmount", "limitUnit", "timeUnit", "costFilters"),
    "aws:cloudwatch/logGroup:LogGroup": ("name", "retentionInDays"),
    "aws:cloudwatch/eventRule:EventRule": ("eventPattern",),
    "gcp:storage/bucket:Bucket": (
        "location",
        "uniformBucketLevelAccess",
        "publicAccessPrevention",
        "versioning.enabled",
        "forceDestroy",
    ),
    "gcp:storage/bucketObject:BucketObject": ("name",),
    "gcp:storage/bucketIAMMember:BucketIAMMember": ("role",),
    "gcp:serviceaccount/account:Account": ("accountId",),
    "gcp:compute/subnetwork:Subnetwork": ("region", "ipCidrRange"),
    "gcp:compute/firewall:Firewall": ("sourceRanges", "allows"),
    "gcp:compute/disk:Disk": ("zone", "size", "type"),
    "gcp:compute/instance:Instance": (
        "machineType",
        "zone",
        "guestAccelerators",
        "scheduling",
        "bootDisk.initializeParams.image",
    ),
    "gcp:compute/instanceTemplate:InstanceTemplate": ("machineType", "scheduling"),
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": ("region", "targetSize"),
    "gcp:billing/budget:Budget": ("amount", "thresholdRules"),
    "gcp:logging/projectBucketConfig:ProjectBucketConfig": ("bucketId", "retentionDays"),
    "gcp:logging/projectSink:ProjectSink": ("filter",),
    "azure-native:resources:ResourceGroup": ("resourceGroupName", "location"),
    "azure-native:storage:StorageAccount": (
        "accountName",
        "allowBlobPublicAccess",
        "enableHttpsTrafficOnly",
        "minimumTlsVersion",
        "encryption.services.blob.enabled",
    ),
    "azure-native:storage:BlobServiceProperties": ("isVersioningEnabled",),
    "azure-native:storage:BlobContainer": ("containerName", "publicAccess"),
    "azure-native:storage:Blob": ("blobName",),
    "azure-native:authorization:RoleDefinition": ("roleName", "permissions"),
    "azure-native:authorization:RoleAssignment": ("principalType",),
    "azure-native:compute:Disk": ("diskSizeGB", "sku.name"),
    "azure-native:compute:VirtualMachine": (
        "hardwareProfile.vmSize",
        "priority",
        "evictionPolicy",
        "billingProfile.maxPrice",
        "scheduledEventsProfile",
        "storageProfile.imageReference",
    ),
    "azure-native:compute:VirtualMachineScaleSet": (
        "sku",
        "virtualMachineProfile.priority",
        "virtualMachineProfile.evictionPolicy",
        "virtualMachineProfile.billingProfile.maxPrice",
        "spotRestorePolicy",
    ),
    "azure-native:network:PublicIPAddress": ("sku.name", "publicIPAllocationMethod"),
    "azure-native:network:NetworkSecurityGroup": ("securityRules",),
    "azure-native:consumption:Budget": ("amount", "timeGrain", "notifications"),
    "azure-native:monitor:ActivityLogAlert": ("condition",),
    "kubernetes:core/v1:Namespace": ("metadata.name",),
    "kubernetes:core/v1:ServiceAccount": ("metadata.annotations",),
    "kubernetes:core/v1:PersistentVolumeClaim": ("spec.resources.requests.storage", "spec.storageClassName"),
    "kubernetes:apps/v1:Deployment": (
        "spec.template.spec.containers.0.image",
        "spec.template.spec.containers.0.resources.limits",
        "spec.template.spec.nodeSelector",
        "spec.template.spec.tolerations",
        "spec.template.spec.terminationGracePeriodSeconds",
    ),
    "kubernetes:core/v1:Service": ("spec.type", "spec.ports"),
    "nebius:index/computeV1Instance:ComputeV1Instance": (
        "resources.platform",
        "resources.preset",
        "preemptible",
        "recoveryPolicy",
        "stopped",
        "networkInterfaces.0.publicIpAddress",
        "bootDisk.existingDisk.id",
        "secondaryDisks",
        "serviceAccountId",
    ),
    "nebius:index/computeV1Disk:ComputeV1Disk": ("type", "sizeGibibytes", "sourceImageFamily.imageFamily"),
    "nebius:index/storageV1Bucket:StorageV1Bucket": ("versioningPolicy", "bucketPolicy.rules"),
    "nebius:index/iamV1ServiceAccount:IamV1ServiceAccount": ("name",),
    "nebius:index/iamV2AccessKey:IamV2AccessKey": ("secretDeliveryMode",),
    "nebius:index/iamV1AccessPermit:IamV1AccessPermit": ("role",),
    # the Runpod pod and network volume are dynamic resources (components/runpod_provider.py)
    "pulumi-python:dynamic:Resource": (
        "gpu_type",
        "gpu_count",
        "cloud_type",
        "data_center",
        "max_price_per_gpu",
        "image",
        "container_disk_gb",
        "network_volume_id",
        "volume_mount_path",
        "ports",
        "stopped",
        "size_gb",
    ),
    "kubernetes:batch/v1:Job": (
        "spec.completionMode",
        "spec.parallelism",
        "spec.backoffLimit",
        "spec.activeDeadlineSeconds",
        "spec.podFailurePolicy",
        "spec.template.spec.nodeSelector",
        "spec.template.spec.terminationGracePeriodSeconds",
    ),
}


def _get(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _compact(value: Any) -> Any:
    """JSON text inside properties (policies, event patterns) shown as objects; long scripts summarised."""
    if isinstance(value, str):
        if value.startswith("#!"):
            return f"<script: {len(value.encode())} bytes>"
        if value[:1] in "{[":
            try:
                return json.loads(value)
            except ValueError:
                return value
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the engine sends every number as a double
    if isinstance(value, Mapping):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def properties(resource: Declared) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in KEY_PROPERTIES.get(resource.type, ()):
        value = _get(resource.inputs, path)
        if value is not None:
            found[path] = _compact(value)
    if resource.type == "gcp:compute/instance:Instance":
        script = _get(resource.inputs, "metadata.startup-script")
        if isinstance(script, str):
            found["metadata.startup-script"] = _compact(script)
    if resource.type == "azure-native:compute:VirtualMachine":
        data = _get(resource.inputs, "osProfile.customData")
        if isinstance(data, str):
            found["osProfile.customData"] = f"<base64: {len(data)} characters>"
    return found


def _held_disks(rendered: Rendered) -> list[Declared]:
    """The weights-cache disks the stack holds (protected; a dynamic resource: one with a size)."""
    return [
        r
        for r in rendered.resources
        if r.type in DISK_TYPES
        and r.protect
        and ("weights" in r.name or "cache" in r.name)
        and (r.type != "pulumi-python:dynamic:Resource" or "size_gb" in r.inputs)
    ]


def unattached(rendered: Rendered) -> list[Declared]:
    """Held weights-cache disks that no other declared resource names (attaches, mounts)."""
    text = {r.urn: json.dumps(r.inputs, default=str) for r in rendered.resources}
    out = []
    for disk in _held_disks(rendered):
        ids = (engine_id(disk), disk.name)
        users = [r for r in rendered.resources if r.urn != disk.urn and any(i in text[r.urn] for i in ids)]
        if not users:
            out.append(disk)
    return out


def notes(rendered: Rendered, node_count: int | None = None) -> list[str]:
    """What a reviewer would otherwise wonder about: a held weights-cache disk attached to nothing
    (a pool's nodes cache weights on their own disks; with no node there is nothing to attach it to)."""
    if node_count is not None and node_count > 1:
        why = f"a pool (node.count {node_count}): its nodes cache the weights on their own disks"
    elif node_count == 0:
        why = "node.count is 0: there is no node to attach it to"
    else:
        why = "no declared resource attaches it"
    return [
        f"{disk.name}: the weights cache is kept (a hold) and attached to no node: {why}; "
        "with node.count 1 the node gets it again"
        for disk in unattached(rendered)
    ]


def as_json(rendered: Rendered) -> dict[str, Any]:
    def parent_name(resource: Declared) -> str | None:
        parent = rendered.by_urn(resource.parent)
        return parent.name if parent is not None else None

    return {
        "stack": rendered.stack,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "parent": parent_name(r),
                "protect": r.protect,
                "retain_on_delete": r.retain_on_delete,
                "ignore_changes": list(r.ignore_changes),
                "properties": properties(r),
            }
            for r in rendered.resources
        ],
        "outputs": rendered.outputs,
    }


def _format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def as_text(rendered: Rendered) -> str:
    children: dict[str, list[Declared]] = {}
    urns = {r.urn for r in rendered.resources}
    for r in rendered.resources:
        children.setdefault(r.parent if r.parent in urns else "", []).append(r)
    lines = [
        f"stack {rendered.stack}: {len(rendered.resources)} resources declared",
        "(rendered by the mock engine without a cloud account: ids, ARNs and generated names are stand-ins)",
    ]

    def walk(parent: str, depth: int) -> None:
        for r in sorted(children.get(parent, []), key=lambda d: (d.custom, d.type, d.name)):
            flags = [f for f, on in (("protect", r.protect), ("retain-on-delete", r.retain_on_delete)) if on]
            if r.ignore_changes:
                flags.append("ignore-changes=" + ",".join(r.ignore_changes))
            head = f"{'  ' * depth}{r.type}  {r.name}"
            lines.append(head + (f"  [{', '.join(flags)}]" if flags else ""))
            for key, value in properties(r).items():
                lines.append(f"{'  ' * (depth + 2)}{key}: {_format_value(value)}")
            walk(r.urn, depth + 1)

    walk("", 1)
    lines.append("outputs:")
    for key, value in rendered.outputs.items():
        lines.append(f"  {key}: {_format_value(value)}")
    return "\n".join(lines)
