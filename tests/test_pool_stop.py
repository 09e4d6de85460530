"""Each pool declares its scale-to-zero path and the node's permission for it, scoped to its own group
(components/pool_stop.py), rendered with Pulumi's mocks; the policy documents are parsed."""

from __future__ import annotations

import base64
import json
import re

import pytest

from components.mocks import Rendered
from spoteval.agent.config import parse
from spoteval.agent.scale_zero import ScaleTarget
from tests.test_stacks import STACK_OF, agent_template, rendered, variant, variant_cached

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: `resource.name == "projects/P/regions/R/instanceGroupManagers/N"`, the one form the condition takes
GCP_CONDITION = re.compile(
    r'^resource\.name == "projects/(?P<project>[^/"]+)/regions/(?P<region>[^/"]+)'
    r'/instanceGroupManagers/(?P<group>[^/"]+)"$'
)


def pool(provider: str) -> Rendered:
    if provider == "k8s":  # a Kubernetes pool needs a shared (ReadWriteMany) spool claim
        return variant(provider, node__count=3, k8s__shared_spool_class="standard-rwx")
    return variant_cached(provider, "node__count", 3)


def scale_resources(r: Rendered) -> list[str]:
    return sorted(d.type for d in r.resources if d.name.endswith("-scale-to-zero"))


def test_an_aws_pool_node_may_update_its_own_group_only_while_it_carries_the_runs_tag() -> None:
    r = pool("aws")
    group = r.one("aws:autoscaling/group:Group")
    run_id = r.outputs["run_id"]
    assert group.inputs["name"] == f"{run_id}-pool"
    [policy] = [d for d in r.of_type("aws:iam/rolePolicy:RolePolicy") if d.name.endswith("-scale-to-zero")]
    doc = json.loads(policy.inputs["policy"])
    assert doc == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleOwnPoolToZero",
                "Effect": "Allow",
                "Action": ["autoscaling:UpdateAutoScalingGroup"],
                "Resource": [f"arn:aws:mock:::{group.name}"],
                "Condition": {"StringEquals": {"autoscaling:ResourceTag/spot-eval-run": run_id}},
            }
        ],
    }
    [bucket] = [d for d in r.of_type("aws:iam/rolePolicy:RolePolicy") if d.name.endswith("-bucket")]
    assert policy.inputs["role"] == bucket.inputs["role"]  # the node's own role
    script = base64.b64decode(r.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["userData"]).decode()
    section = agent_template(script)["pool"]
    assert section["scale_to_zero"] == {
        "engine": "aws_asg",
        "name": f"{run_id}-pool",
        "region": r.outputs["region"],
    }


def test_a_gcp_pool_node_may_update_the_named_regional_group_only() -> None:
    r = pool("gcp")
    group = r.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager").inputs
    custom = r.one("gcp:projects/iAMCustomRole:IAMCustomRole").inputs
    member = r.one("gcp:projects/iAMMember:IAMMember").inputs
    assert custom["permissions"] == ["compute.instanceGroupManagers.update"]
    match = GCP_CONDITION.match(member["condition"]["expression"])
    assert match is not None
    assert match.groupdict() == {
        "project": custom["project"],
        "region": group["region"],
        "group": group["name"],
    }
    assert group["name"] == f"{r.outputs['run_id']}-pool"
    email = r.one("gcp:serviceaccount/account:Account").inputs["accountId"]
    assert member["member"] == f"serviceAccount:{email}@mock.iam.gserviceaccount.com"
    assert member["project"] == custom["project"]


def test_an_azure_pool_node_may_read_and_write_its_own_scale_set_only() -> None:
    r = pool("azure")
    scale_set = r.one("azure-native:compute:VirtualMachineScaleSet")
    [definition] = [
        d for d in r.of_type("azure-native:authorization:RoleDefinition") if d.name.endswith("-scale-to-zero")
    ]
    [assignment] = [
        d for d in r.of_type("azure-native:authorization:RoleAssignment") if d.name.endswith("-scale-to-zero")
    ]
    scale_set_id = assignment.inputs["scope"]
    assert scale_set_id.endswith(f"/{scale_set.name}")
    assert scale_set.inputs["vmScaleSetName"] == f"{r.outputs['run_id']}-pool"
    assert definition.inputs["permissions"] == [
        {
            "actions": [
                "Microsoft.Compute/virtualMachineScaleSets/read",
                "Microsoft.Compute/virtualMachineScaleSets/write",
            ]
        }
    ]
    assert (
        definition.inputs["assignableScopes"] == [scale_set_id] and definition.inputs["scope"] == scale_set_id
    )
    assert assignment.inputs["roleDefinitionId"].endswith(f"/{definition.name}")
    [blob] = [
        d for d in r.of_type("azure-native:authorization:RoleAssignment") if d.name.endswith("-blob-writer")
    ]
    assert assignment.inputs["principalId"] == blob.inputs["principalId"]  # the node's own identity


def test_a_kubernetes_pool_may_scale_only_its_model_servers_deployment() -> None:
    r = pool("k8s")
    run_id = r.outputs["run_id"]
    role = r.one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs
    binding = r.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs
    server = r.one("kubernetes:apps/v1:Deployment").inputs["metadata"]
    account = r.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": [server["name"]],
            "verbs": ["get", "patch"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert role["metadata"]["namespace"] == server["namespace"] == account["namespace"]
    config = parse(json.loads(r.one("kubernetes:core/v1:ConfigMap").inputs["data"]["agent.json"]))
    assert config.pool is not None
    assert config.pool.scale_to_zero == ScaleTarget(
        "k8s_deployment", f"{run_id}-server", namespace=server["namespace"]
    )


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure", "k8s"])
def test_a_single_node_declares_no_scale_to_zero(provider: str) -> None:
    assert scale_resources(rendered(STACK_OF[provider])) == []
