"""Scale-to-zero of a pool, stack side: the group's fixed name, the agent's `pool.scale_to_zero`
section, and the node's one permission for it, on its own group only.

The node that finds the run done scales its pool to zero through the engine
(spoteval/agent/scale_zero.py; the calls and permissions are facts in spoteval/pool_engines.py,
`POOL_SCALE`). Each provider component calls one function here:

- AWS (`aws`): an inline policy on the node's role allowing `autoscaling:UpdateAutoScalingGroup` on
  the group's ARN, and only while the group carries the run's `spot-eval-run` tag
  (`autoscaling:ResourceTag/spot-eval-run`).
- GCP (`gcp`): a custom role with `compute.instanceGroupManagers.update`, granted to the node's
  service account with an IAM condition naming the regional MIG (a MIG takes no IAM policy of its
  own).
- Azure (`azure`): a custom role with the scale set's read and write actions, assigned to the node's
  identity at the scale set's own id.
- Kubernetes (`kubernetes`): a Role allowing `get` and `patch` of `deployments/scale` for the model
  server's Deployment alone (`resourceNames`), bound to the agents' service account.

Runpod and Nebius pools are N single nodes: each stops itself (`stop_rules.on_done: api_stop`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import iam
from pulumi_azure_native import authorization
from pulumi_gcp import projects

from components.base import child
from components.settings import Settings
from spoteval.pool_engines import POOL_SCALE

#: the tag every resource of a run carries (components/settings.py `tags`)
RUN_TAG: Final = "spot-eval-run"


def _own(settings: Settings, key: str) -> str:
    """A field of the provider's own block (its module's type; read by name to keep imports one-way)."""
    return str(getattr(settings.block, key))


def group_name(settings: Settings) -> str:
    """The pool's fixed name (ASG, MIG, scale set): the agent's config names it before it exists."""
    return f"{settings.run_id}-pool"


def server_name(settings: Settings) -> str:
    """The Kubernetes model server's Deployment (components/kubernetes.py names it so)."""
    return f"{settings.run_id}-server"


def agent_target(settings: Settings) -> dict[str, str] | None:
    """The agent's `pool.scale_to_zero` for this stack's pool; None where nodes stop themselves."""
    fact = POOL_SCALE.get(settings.provider)
    if fact is None or not settings.node.pool:
        return None
    target = {"engine": fact.engine, "name": group_name(settings)}
    if settings.provider == "aws":
        target["region"] = settings.region
    elif settings.provider == "gcp":
        target.update(project=_own(settings, "project"), region=settings.region)
    elif settings.provider == "azure":
        target["resource_group"] = _own(settings, "resource_group")
    else:
        target.update(name=server_name(settings), namespace=_own(settings, "namespace"))
    return target


# --- the permission, per engine --------------------------------------------------------------------


def aws_policy(group_arn: str, run_id: str) -> dict[str, Any]:
    """The node role's statement: its own group, while the group carries the run's tag."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleOwnPoolToZero",
                "Effect": "Allow",
                "Action": list(POOL_SCALE["aws"].permissions),
                "Resource": [group_arn],
                "Condition": {"StringEquals": {f"autoscaling:ResourceTag/{RUN_TAG}": run_id}},
            }
        ],
    }


def aws(
    name: str, parent: pulumi.Resource, role: pulumi.Input[str], group_arn: pulumi.Input[str], run_id: str
) -> iam.RolePolicy:
    return iam.RolePolicy(
        f"{name}-scale-to-zero",
        role=role,
        policy=pulumi.Output.from_input(group_arn).apply(lambda arn: json.dumps(aws_policy(arn, run_id))),
        opts=child(parent),
    )


def gcp_condition(project: str, region: str, group: str) -> str:
    return f'resource.name == "projects/{project}/regions/{region}/instanceGroupManagers/{group}"'


def gcp(
    name: str, parent: pulumi.Resource, settings: Settings, member: pulumi.Input[str]
) -> projects.IAMMember:
    project = _own(settings, "project")
    role = projects.IAMCustomRole(
        f"{name}-scale-to-zero",
        project=project,
        role_id=f"spotEvalScaleToZero_{settings.run_id.replace('-', '_')}"[:64],
        title=f"spot-eval scale to zero ({settings.run_id})",
        permissions=list(POOL_SCALE["gcp"].permissions),
        opts=child(parent),
    )
    return projects.IAMMember(
        f"{name}-scale-to-zero",
        project=project,
        role=role.name,
        member=member,
        condition=projects.IAMMemberConditionArgs(
            title="own pool only",
            expression=gcp_condition(project, settings.region, group_name(settings)),
        ),
        opts=child(parent),
    )


def azure(
    name: str,
    parent: pulumi.Resource,
    settings: Settings,
    scale_set_id: pulumi.Input[str],
    principal_id: pulumi.Input[str],
) -> authorization.RoleAssignment:
    role = authorization.RoleDefinition(
        f"{name}-scale-to-zero",
        role_definition_id=str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"spot-eval/{settings.stack}/{settings.run_id}/pool")
        ),
        role_name=f"spot-eval scale to zero ({settings.run_id})",
        description="Read and scale this run's scale set.",
        scope=scale_set_id,
        assignable_scopes=[scale_set_id],
        permissions=[authorization.PermissionArgs(actions=list(POOL_SCALE["azure"].permissions))],
        opts=child(parent),
    )
    return authorization.RoleAssignment(
        f"{name}-scale-to-zero",
        principal_id=principal_id,
        principal_type="ServicePrincipal",
        role_definition_id=role.id,
        scope=scale_set_id,
        opts=child(parent),
    )


def kubernetes(
    name: str, parent: pulumi.Resource, settings: Settings, namespace: str, service_account: pulumi.Input[str]
) -> k8s.rbac.v1.RoleBinding:
    meta = k8s.meta.v1.ObjectMetaArgs(name=f"{settings.run_id}-scale-to-zero", namespace=namespace)
    role = k8s.rbac.v1.Role(
        f"{name}-scale-to-zero",
        metadata=meta,
        rules=[
            k8s.rbac.v1.PolicyRuleArgs(
                api_groups=["apps"],
                resources=["deployments/scale"],
                resource_names=[server_name(settings)],
                verbs=["get", "patch"],
            )
        ],
        opts=child(parent),
    )
    return k8s.rbac.v1.RoleBinding(
        f"{name}-scale-to-zero",
        metadata=meta,
        role_ref=k8s.rbac.v1.RoleRefArgs(
            api_group="rbac.authorization.k8s.io", kind="Role", name=role.metadata.apply(lambda m: m.name)
        ),
        subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=service_account, namespace=namespace)],
        opts=child(parent),
    )
