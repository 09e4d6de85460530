"""Provider facts behind the stacks' stop rules and the node's permissions (the rest of the provider
facts: spoteval/providers.py, at its size limit): the metric the AWS agent publishes for the idle
alarm, and the condition keys, roles (Nebius: `NEBIUS_ROLES`) and schedules the stacks rely on, each
with its page and the date checked. Standard library only: this module ships in the node's agent bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.providers import Source


@dataclass(frozen=True)
class AgentMetric:
    """A metric the agent publishes for a provider-side stop rule to watch."""

    #: the endpoint (a format string with `{region}`)
    url: str
    version: str
    #: the service name in the request signature
    service: str
    namespace: str
    metric: str
    #: the dimension naming the node (the alarm's EC2 action acts on the instance it names)
    dimension: str
    #: seconds between two datapoints (standard resolution: one datapoint a minute is stored)
    interval_s: float
    source: Source


#: AWS: the agent's has-work metric, published with PutMetricData (Query API, GET, SigV4)
AWS_AGENT_METRIC: Final = AgentMetric(
    url="https://monitoring.{region}.amazonaws.com/",
    version="2010-08-01",
    service="monitoring",
    namespace="SpotEval/Agent",
    metric="HasWork",
    dimension="InstanceId",
    interval_s=60.0,
    source=Source(
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricData.html",
        note="namespace limited with cloudwatch:namespace: "
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html",
    ),
)

#: Facts behind the stop rules and permissions the stacks declare, each with its page.
PERMISSION_FACTS: Final[Mapping[str, Source]] = {
    "aws_create_only": Source(
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes-enforce.html",
        note="a bucket policy may deny s3:PutObject when s3:if-none-match is Null; "
        "s3:ObjectCreationOperation false exempts CreateMultipartUpload and UploadPart; CopyObject "
        "into the prefix is refused",
    ),
    "aws_idle_alarm_missing_data": Source(
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html"
        "#alarms-and-missing-data",
        note="treat_missing_data breaching: a missing datapoint counts as breaching the threshold",
    ),
    "aws_alarm_ec2_stop": Source(
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/UsingAlarmActions.html",
        note="arn:aws:automate:REGION:ec2:stop stops the instance named by the alarm metric's "
        "InstanceId dimension; actions run on a change of state only",
    ),
    "aws_user_stop_disables_request": Source(
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html",
        note="a persistent request whose instance is stopped (by a user, an alarm, a schedule) is "
        "disabled and opens again only when the instance is started (StartInstances); an "
        "interruption reopens it by itself",
    ),
    "aws_cancel_request_keeps_instance": Source(
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-instances-cancel.html",
        note="cancelling an active request does not terminate its instance; a disabled or open "
        "request can be cancelled",
    ),
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


@dataclass(frozen=True)
class PoolEngine:
    """A provider's group engine, which a pool stack declares and the operator drives as one node."""

    engine: str
    #: True when the engine itself brings back the members the provider took
    restores_members: bool
    #: the members' states that count as serving, in the provider's words
    serving: frozenset[str]
    source: Source


#: provider -> its pool engine (spoteval/clouds/groups.py)
POOL_ENGINES: Final[Mapping[str, PoolEngine]] = {
    "aws": PoolEngine(
        "Auto Scaling group",
        True,
        frozenset({"InService"}),
        Source(
            "https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-lifecycle.html",
            note="the group launches a replacement for a member the provider took (lifecycle state "
            "InService once it serves)",
        ),
    ),
    "gcp": PoolEngine(
        "regional managed instance group",
        True,
        frozenset({"RUNNING"}),
        Source(
            "https://cloud.google.com/compute/docs/instance-groups/create-mig-with-preemptible-vms",
            note="the group recreates preempted members when capacity returns",
        ),
    ),
    "azure": PoolEngine(
        "Spot virtual machine scale set",
        False,
        frozenset({"PowerState/running"}),
        Source(
            "https://learn.microsoft.com/azure/virtual-machine-scale-sets/use-spot",
            note="with eviction policy Delete the evicted members are deleted; Spot try & restore "
            "(spotRestorePolicy.restoreTimeout) brings them back only within its window; whether the "
            "capacity itself drops on eviction is not confirmed, so the operator sets it back",
        ),
    ),
}


_NB_ACTIONS = "https://docs.nebius.com/object-storage/supported-actions"

#: Nebius roles by use: the node's (bucket policy rules with key or "prefix*" paths, storage/v1/
#: bucket_policy.proto; a permit on the secret) and the operator's. Documented: general, storage.*
NEBIUS_ROLES: Final = {
    "write": ("storage.uploader", Source(_NB_ACTIONS, note="PutObject, multipart; no Get, no Delete")),
    "read": ("storage.object-viewer", Source(_NB_ACTIONS, note="GetObject, HeadObject")),
    "list": (
        "storage.object-lister",
        Source(_NB_ACTIONS, note="key names; whether a prefix rule covers listing: [unconfirmed]"),
    ),
    "secret": (
        "mysterybox.payload-viewer",
        Source("https://docs.nebius.com/mysterybox/secrets/create-version", note="sub-role of admin only"),
    ),
    "operator": (
        "editor",
        Source("https://docs.nebius.com/iam/authorization/roles", note="start/stop; no compute-only role"),
    ),
}
