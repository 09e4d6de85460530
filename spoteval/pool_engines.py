"""How a pool is scaled to zero from one of its nodes, per provider: the engine's call and the one
permission the node needs on its own group. Provider facts, each with its source and the date checked
(spoteval/providers.py holds the rest, and the metadata paths these calls read their credentials
from: `GCP.metadata.paths["token"]`, `AZURE.metadata.paths["identity_token"]`). Read by the agent
(spoteval/agent/scale_zero.py) and the stacks (components/pool_stop.py). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.providers import Source


@dataclass(frozen=True)
class PoolScale:
    """How the node that finds its pool's run done scales the pool to zero through its engine
    (spoteval/agent/scale_zero.py), and the one permission the stack gives the node for it
    (components/pool_stop.py)."""

    engine: str  # the agent config's `pool.scale_to_zero.engine`
    #: the call, a format string over the config's fields (`{region}`, `{name}`, ...)
    url: str
    method: str
    #: what the node's identity must be allowed, on its own group only
    permissions: tuple[str, ...]
    #: the node's credential for the call: a metadata path's name in spoteval/providers.py, or a file
    credential: str
    source: Source
    api_version: str = ""
    #: the metadata path's name where the node reads what the stack cannot know (Azure: the subscription)
    identity: str = ""


#: provider key -> how its pool is scaled to zero. Runpod and Nebius pools are N single nodes:
#: each stops itself through its provider's API (`stop_rules.on_done: api_stop`).
POOL_SCALE: Final[Mapping[str, PoolScale]] = {
    "aws": PoolScale(
        engine="aws_asg",
        url="https://autoscaling.{region}.amazonaws.com/",
        method="GET",  # the Query API, Signature Version 4 (as DescribeSpotPriceHistory)
        permissions=("autoscaling:UpdateAutoScalingGroup",),
        credential="credentials",  # AWS.metadata.paths: the instance role (spoteval/agent/aws_price.py)
        api_version="2011-01-01",
        source=Source(
            "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_UpdateAutoScalingGroup.html",
            note="MinSize=0 and DesiredCapacity=0 in one call; resource type autoScalingGroup "
            "(arn:aws:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{name}), "
            "condition key autoscaling:ResourceTag/${TagKey}: "
            "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html",
        ),
    ),
    "gcp": PoolScale(
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
    ),
    "azure": PoolScale(
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
    ),
    "k8s": PoolScale(
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
    ),
}
