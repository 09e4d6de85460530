"""AWS EC2 Spot: every fact spot-eval relies on, each with its source and the date checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers.base import (
    AgentMetric,
    EventHistory,
    InstanceShape,
    K8sFlavour,
    Metadata,
    PlaneOption,
    PoolEngine,
    PoolScale,
    PriceApi,
    ProviderFacts,
    Regions,
    Source,
    cited,
    table_gpus,
)

KEY: Final = "aws"
#: the module:class of the control plane (spoteval/clouds/), loaded when a stack of this provider is driven
PLANE: Final = "spoteval.clouds.aws:AwsPlane"
#: the module of the stack component (components/), loaded when a stack of this provider is rendered
COMPONENT: Final = "components.aws"

_AWS_SPOT = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
_AWS_IMDS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html"
_AWS_BEHAVIOUR = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/interruption-behavior.html"
_AWS_PRICE = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html"
_AWS_ADDRESS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html"
_AWS_BILLING = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html"
_AWS_SHUTDOWN = (
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html"
)

METADATA: Final = Metadata(
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
)

PRICE: Final = PriceApi(
    url="https://ec2.{region}.amazonaws.com/",
    version="2016-11-15",
    auth="instance role (DescribeSpotPriceHistory, Signature Version 4)",
    node_markets=frozenset({"spot"}),
)

FACTS: Final = ProviderFacts(
    name="aws",
    key="aws",
    title="AWS EC2 Spot",
    notice_s=120,
    notice_via="IMDSv2 poll of spot/instance-action (every 5 s); earlier hint: rebalance recommendation",
    sigterm_grace_s=30.0,
    metadata=METADATA,
    price=PRICE,
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
    sources=cited(
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

#: the notice comes from the instance metadata service
NOTICES: Final = METADATA

#: Error codes of StartInstances that mean no capacity or quota now (worth retrying later)
CAPACITY_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
    }
)
CAPACITY_SOURCE: Final = Source("https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html")

REGIONS: Final = Regions(
    region=r"^[a-z]{2}(-gov)?-[a-z]+-\d$",
    zone_suffix=r"[a-z]",
    zones=(),
    source=Source(
        "https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-availability-zones.html",
        note="the code of a zone is its region's code followed by a letter identifier (us-east-2a)",
    ),
)

POOLS: Final = PoolEngine(
    "Auto Scaling group",
    True,
    frozenset({"InService"}),
    Source(
        "https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-lifecycle.html",
        note="the group launches a replacement for a member the provider took (lifecycle state "
        "InService once it serves)",
    ),
)
#: the module:class of the plane that drives a pool through its engine (spoteval/clouds/groups.py)
GROUP_PLANE: Final = "spoteval.clouds.groups:AwsGroupPlane"

POOL_SCALE: Final = PoolScale(
    engine="aws_asg",
    url="https://autoscaling.{region}.amazonaws.com/",
    method="GET",  # the Query API, Signature Version 4 (as DescribeSpotPriceHistory)
    permissions=("autoscaling:UpdateAutoScalingGroup",),
    credential="credentials",  # FACTS.metadata.paths: the instance role (spoteval/agent/aws_price.py)
    api_version="2011-01-01",
    source=Source(
        "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_UpdateAutoScalingGroup.html",
        note="MinSize=0 and DesiredCapacity=0 in one call; resource type autoScalingGroup "
        "(arn:aws:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{name}), "
        "condition key autoscaling:ResourceTag/${TagKey}: "
        "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html",
    ),
)

_WARNING = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
_STATES = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html"

# EventBridge rules of the stack write each matching event, as JSON, to a Logs group kept 400
# days; the warning comes two minutes before EC2 stops or terminates the instance.
EVENTS: Final = EventHistory(
    capture="CloudWatch Logs group /spot-eval/RUN_ID/ec2-events (EventBridge rules)",
    api="logs:FilterLogEvents",
    interruptions=frozenset({"EC2 Spot Instance Interruption Warning"}),
    state_change="EC2 Instance State-change Notification",
    stopped_states=frozenset({"stopped", "terminated"}),
    retention_days=400,
    source=Source(
        "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html"
    ),
    names_source=Source(
        _WARNING, note=f"state names: {_STATES}; detail: instance-id, instance-action / state"
    ),
)

_G6: Final = "https://aws.amazon.com/ec2/instance-types/g6/"
_G5: Final = "https://aws.amazon.com/ec2/instance-types/g5/"

#: GPUs, vCPUs and memory per instance type
INSTANCE_TYPES: Final[Mapping[str, InstanceShape]] = {
    "g6.xlarge": InstanceShape(1, "nvidia-l4", 4, 16, _G6),
    "g6.2xlarge": InstanceShape(1, "nvidia-l4", 8, 32, _G6),
    "g6.12xlarge": InstanceShape(4, "nvidia-l4", 48, 192, _G6),
    "g5.xlarge": InstanceShape(1, "nvidia-a10g", 4, 16, _G5),
}


def gpus_of(instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs on one node of this instance type (the table); None when unknown."""
    return table_gpus(INSTANCE_TYPES, instance_type)


#: the agent's has-work metric for the idle alarm, published with PutMetricData (Query API, GET, SigV4)
AGENT_METRIC: Final = AgentMetric(
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

#: Facts behind the stop rules and permissions the stacks declare, each with its page
PERMISSIONS: Final[Mapping[str, Source]] = {
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
}

ROLES: Final[Mapping[str, tuple[str, Source]]] = {}
FLAVOURS: Final[Mapping[str, K8sFlavour]] = {}

#: a simulated preemption is a FIS experiment: the plane needs its template's id
PREEMPT_OPTION: Final = PlaneOption(
    "fis_template_id",
    Source(
        "https://docs.aws.amazon.com/fis/latest/userguide/fis-actions-reference.html"
        "#send-spot-instance-interruptions",
        note="aws:ec2:send-spot-instance-interruptions, run from an experiment template",
    ),
)
