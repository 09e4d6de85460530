"""Every stack in stacks/ rendered by the real program against Pulumi's mock engine, and what it
declares asserted per provider: spot settings, bucket holds and privacy, identity scope, startup
script, stop rules, event capture and outputs. Variants (on-demand, pools, no compute, bad config)
render the same stacks with one key changed."""

from __future__ import annotations

import base64
import copy
import functools
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from components.base import OUTPUT_NAMES
from components.capture import EVENT_CAPTURE
from components.mocks import (
    MOCK_PROJECT_NUMBER,
    Declared,
    Rendered,
    RenderError,
    read_stack_config,
    render_config,
    render_stack,
    stack_files,
    stack_name,
)
from components.startup import AWS_USER_DATA_LIMIT
from spoteval.agent import exits
from spoteval.agent.config import parse as parse_agent_config

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
STACK_FILES = stack_files()
STACKS = {stack_name(p): p for p in STACK_FILES}
PROVIDER_OF = {name: read_stack_config(path)["spot-eval:provider"] for name, path in STACKS.items()}
STACK_OF = {provider: name for name, provider in PROVIDER_OF.items()}
PACKAGE = {"aws": "aws", "gcp": "gcp", "azure": "azure-native", "k8s": "kubernetes"}
#: providers whose stacks are asserted in tests/test_stacks_nebius_runpod.py (their own packages and
#: dynamic providers, an S3-compatible provider for the bundle, their own agent config carriers)
OWN_TESTS = frozenset({"nebius", "runpod"})
COMPUTE_TYPES = frozenset(
    {
        "aws:ec2/instance:Instance",
        "aws:autoscaling/group:Group",
        "aws:ec2/launchTemplate:LaunchTemplate",
        "gcp:compute/instance:Instance",
        "gcp:compute/instanceTemplate:InstanceTemplate",
        "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
        "azure-native:compute:VirtualMachine",
        "azure-native:compute:VirtualMachineScaleSet",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:batch/v1:Job",
    }
)
# Importing a provider's module tree warns about its deprecated resources (not ours).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@functools.cache
def rendered(stack: str) -> Rendered:
    return render_stack(STACKS[stack], now=NOW)


def variant(provider: str, **changes: Any) -> Rendered:
    """The provider's stack with `block__key=value` changes (None deletes the key)."""
    config = copy.deepcopy(read_stack_config(STACKS[STACK_OF[provider]]))
    for path, value in changes.items():
        block, key = path.split("__")
        target = config.setdefault(f"spot-eval:{block}", {})
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return render_config(STACK_OF[provider], config, now=NOW)


@functools.cache
def variant_cached(provider: str, key: str, value: Any) -> Rendered:
    return variant(provider, **{key: value})


def user_data(r: Rendered) -> str:
    return str(r.one("aws:ec2/instance:Instance").inputs["userData"])


def agent_template(script: str) -> dict[str, Any]:
    start = script.index("cat > /etc/spot-eval/agent.template.json <<'SPOT_EVAL_EOF'\n")
    body = script[start:].split("\n", 1)[1]
    template: dict[str, Any] = json.loads(body[: body.index("\nSPOT_EVAL_EOF\n")])
    return template


# --- every stack ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", STACK_FILES, ids=stack_name)
def test_stack_renders_with_the_same_outputs_as_every_other(path: Path) -> None:
    r = rendered(stack_name(path))
    settings = read_stack_config(path)
    captured = () if settings["spot-eval:provider"] in OWN_TESTS else (EVENT_CAPTURE,)
    assert tuple(r.outputs) == OUTPUT_NAMES + captured
    assert r.outputs["provider"] == settings["spot-eval:provider"]
    assert r.outputs["run_id"] == settings["spot-eval:run_id"]
    assert r.outputs["market"] == settings["spot-eval:node"]["market"]
    assert r.outputs["market"] == ("on_demand" if r.outputs["provider"] == "runpod" else "spot")
    assert r.outputs["server_port"] == settings["spot-eval:server"]["port"]
    assert r.outputs["address_kind"] in ("ephemeral", "static")
    assert len(r.outputs["node_ids"]) == 1
    assert r.outputs["bucket_url"].split("://")[0] in ("s3", "gs", "az")


@pytest.mark.parametrize("path", STACK_FILES, ids=stack_name)
def test_every_resource_uses_the_one_explicit_provider_and_sits_in_a_component(path: Path) -> None:
    if PROVIDER_OF[stack_name(path)] in OWN_TESTS:
        pytest.skip("asserted in tests/test_stacks_nebius_runpod.py")
    r = rendered(stack_name(path))
    provider = PROVIDER_OF[stack_name(path)]
    providers = [d for d in r.resources if d.type.startswith("pulumi:providers:")]
    assert [d.type for d in providers] == [f"pulumi:providers:{PACKAGE[provider]}"]
    components = {d.urn: d for d in r.resources if not d.custom}
    assert components and all(c.type.startswith(f"spot-eval:{provider}:") for c in components.values())
    for d in r.resources:
        if not d.custom or d in providers:
            continue
        if d.type == "pulumi-python:dynamic:Resource":  # AWS: the spot request clean-up, region explicit
            run_id = read_stack_config(path)["spot-eval:run_id"]
            assert (provider, d.name, d.inputs["region"]) == ("aws", f"{run_id}-spot-request", "us-east-1")
            continue
        assert d.type.split(":")[0] == PACKAGE[provider], d.type
        assert d.provider.startswith(providers[0].urn + "::"), d.name
        parent = components.get(d.parent)
        if parent is not None:
            assert d.name.startswith(parent.name), (d.name, parent.name)
        else:  # only the Azure resource group sits outside a component
            assert d.type == "azure-native:resources:ResourceGroup"


@pytest.mark.parametrize("path", STACK_FILES, ids=stack_name)
def test_what_holds_results_or_weights_is_protected_and_retained(path: Path) -> None:
    if PROVIDER_OF[stack_name(path)] in OWN_TESTS:
        pytest.skip("asserted in tests/test_stacks_nebius_runpod.py")
    r = rendered(stack_name(path))
    held = {d.type for d in r.resources if d.protect and d.retain_on_delete}
    expected = {
        "aws": {
            "aws:s3/bucket:Bucket",
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            "aws:s3/bucketVersioning:BucketVersioning",
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
            "aws:s3/bucketPolicy:BucketPolicy",
            "aws:ebs/volume:Volume",
            "aws:cloudwatch/logGroup:LogGroup",  # the interruption events
        },
        "gcp": {
            "gcp:storage/bucket:Bucket",
            "gcp:compute/disk:Disk",
            "gcp:logging/projectBucketConfig:ProjectBucketConfig",  # the preemption events
        },
        "azure": {
            "azure-native:resources:ResourceGroup",
            "azure-native:storage:StorageAccount",
            "azure-native:storage:BlobServiceProperties",
            "azure-native:storage:BlobContainer",
            "azure-native:compute:Disk",
        },
        "k8s": {"kubernetes:core/v1:Namespace", "kubernetes:core/v1:PersistentVolumeClaim"},
    }[PROVIDER_OF[stack_name(path)]]
    assert held == expected
    # Nothing that runs compute is protected: `pulumi destroy --exclude-protected` removes it.
    assert not [d for d in r.resources if d.protect and d.type in COMPUTE_TYPES]


@pytest.mark.parametrize("path", STACK_FILES, ids=stack_name)
def test_agent_config_on_the_node_is_accepted_by_the_agent(path: Path) -> None:
    if PROVIDER_OF[stack_name(path)] in OWN_TESTS:
        pytest.skip("asserted in tests/test_stacks_nebius_runpod.py")
    r = rendered(stack_name(path))
    provider = PROVIDER_OF[stack_name(path)]
    if provider == "aws":
        raw = agent_template(user_data(r))
    elif provider == "gcp":
        raw = agent_template(r.one("gcp:compute/instance:Instance").inputs["metadata"]["startup-script"])
    elif provider == "azure":
        custom = r.one("azure-native:compute:VirtualMachine").inputs["osProfile"]["customData"]
        raw = agent_template(base64.b64decode(custom).decode())
    else:
        raw = json.loads(r.one("kubernetes:core/v1:ConfigMap").inputs["data"]["agent.json"])
    config = parse_agent_config({**raw, "node": {**raw["node"], "id": "node-0"}})
    assert config.store == r.outputs["bucket_url"]
    assert config.run_id == r.outputs["run_id"]
    assert config.node.provider == provider


# --- AWS ----------------------------------------------------------------------------------------------


def aws() -> Rendered:
    return rendered(STACK_OF["aws"])


def test_aws_node_is_a_persistent_spot_request_that_stops() -> None:
    instance = aws().one("aws:ec2/instance:Instance").inputs
    market = instance["instanceMarketOptions"]
    assert market["marketType"] == "spot"
    spot = market["spotOptions"]
    assert spot["spotInstanceType"] == "persistent"
    assert spot["instanceInterruptionBehavior"] == "stop"
    assert float(spot["maxPrice"]) <= 0.90
    assert instance["instanceInitiatedShutdownBehavior"] == "stop"
    assert instance["metadataOptions"]["httpTokens"] == "required"
    assert instance["rootBlockDevice"]["encrypted"] is True
    template = aws().one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert template["imageId"].startswith("resolve:ssm:/aws/service/deeplearning/")
    assert template["metadataOptions"]["httpTokens"] == "required"


def test_aws_weights_cache_is_its_own_encrypted_volume_in_the_nodes_zone() -> None:
    volume = aws().one("aws:ebs/volume:Volume")
    assert volume.inputs["availabilityZone"] == aws().outputs["zone"] == "us-east-1a"
    assert volume.inputs["encrypted"] is True
    attachment = aws().one("aws:ec2/volumeAttachment:VolumeAttachment").inputs
    assert attachment["stopInstanceBeforeDetaching"] is True
    volume_id = "vol-0" + ""  # the mock's ids start like real ones
    assert attachment["volumeId"].startswith(volume_id)
    assert f"nvme-Amazon_Elastic_Block_Store_{attachment['volumeId'].replace('-', '')}" in user_data(aws())


def test_aws_bucket_is_private_versioned_encrypted_and_tls_only() -> None:
    r = aws()
    block = r.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        block[k] is True
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    assert (
        r.one("aws:s3/bucketVersioning:BucketVersioning").inputs["versioningConfiguration"]["status"]
        == "Enabled"
    )
    rule = r.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs
    assert rule["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
    assert r.one("aws:s3/bucket:Bucket").inputs["forceDestroy"] is False
    policy = json.loads(r.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert policy["Statement"][0]["Effect"] == "Deny"
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_aws_node_role_reaches_only_its_bucket_and_spot_prices() -> None:
    r = aws()
    bucket_arn = "arn:aws:mock:::" + r.one("aws:s3/bucket:Bucket").name
    node_policy = next(d for d in r.of_type("aws:iam/rolePolicy:RolePolicy") if d.name.endswith("-bucket"))
    statements = json.loads(node_policy.inputs["policy"])["Statement"]
    resources = {res for s in statements for res in s["Resource"]}
    run = "runs/qwen7b-drill-aws/*"
    assert resources == {bucket_arn, f"{bucket_arn}/spot-eval/*", f"{bucket_arn}/{run}", "*"}
    actions = {a for s in statements for a in s["Action"]}
    assert "ec2:DescribeSpotPriceHistory" in actions
    assert not [a for a in actions if "Delete" in a or a.endswith(":*")]
    # every statement exactly: tests/test_privilege.py


def test_aws_user_data_fits_and_carries_no_credentials() -> None:
    script = user_data(aws())
    assert len(script.encode()) < AWS_USER_DATA_LIMIT
    assert "AWS_SECRET_ACCESS_KEY" not in script and "aws_secret" not in script.lower()
    assert "spot-eval/agent-bundle.zip" in script
    keys = {d.inputs["key"] for d in aws().of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    assert keys == {"spot-eval/agent-bundle.zip", "spot-eval/manifest.jsonl"}


def test_aws_stop_rules_runtime_idle_and_budget() -> None:
    r = aws()
    schedule = r.one("aws:scheduler/schedule:Schedule")
    assert schedule.inputs["scheduleExpression"] == "at(2026-12-02T15:00:00)"  # NOW + 30 h
    assert schedule.inputs["target"]["arn"] == "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
    instance_id = r.outputs["node_ids"][0]
    assert json.loads(schedule.inputs["target"]["input"]) == {"InstanceIds": [instance_id]}
    assert schedule.ignore_changes == ("scheduleExpression",)
    alarm = r.one("aws:cloudwatch/metricAlarm:MetricAlarm").inputs
    assert alarm["alarmActions"] == ["arn:aws:automate:us-east-1:ec2:stop"]
    assert alarm["dimensions"] == {"InstanceId": instance_id}
    assert alarm["period"] * alarm["evaluationPeriods"] == 20 * 60
    budget = r.one("aws:budgets/budget:Budget").inputs
    assert budget["limitAmount"] == "40.00"
    assert {n["thresholdType"] for n in budget["notifications"]} == {"PERCENTAGE"}
    assert budget["notifications"][0]["subscriberEmailAddresses"] == ["eval-oncall@example.com"]


def test_aws_interruption_events_of_this_node_go_to_a_retained_log_group() -> None:
    r = aws()
    rules = r.of_type("aws:cloudwatch/eventRule:EventRule")
    patterns = [json.loads(d.inputs["eventPattern"]) for d in rules]
    assert {p["detail-type"][0] for p in patterns} == {
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
    }
    assert all(p["detail"]["instance-id"] == r.outputs["node_ids"] for p in patterns)
    assert len(r.of_type("aws:cloudwatch/eventTarget:EventTarget")) == 3
    log_group = r.one("aws:cloudwatch/logGroup:LogGroup")
    assert log_group.retain_on_delete and log_group.inputs["retentionInDays"] >= 365


def test_aws_on_demand_is_the_same_node_without_market_options() -> None:
    r = variant_cached("aws", "node__market", "on_demand")
    instance = r.one("aws:ec2/instance:Instance").inputs
    assert "instanceMarketOptions" not in instance
    assert r.outputs["market"] == "on_demand"
    assert agent_template(instance["userData"])["node"]["market"] == "on_demand"


def test_aws_pool_is_a_price_capacity_optimized_spot_group() -> None:
    r = variant_cached("aws", "node__count", 3)
    assert not r.of_type("aws:ec2/instance:Instance")
    # the weights-cache volume stays, unattached: pool nodes cache on their root volume
    assert r.one("aws:ebs/volume:Volume").protect
    assert not r.of_type("aws:ec2/volumeAttachment:VolumeAttachment")
    group = r.one("aws:autoscaling/group:Group").inputs
    assert group["capacityRebalance"] is True
    assert group["desiredCapacity"] == group["minSize"] == group["maxSize"] == 3
    distribution = group["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["spotAllocationStrategy"] == "price-capacity-optimized"
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 0
    assert float(distribution["spotMaxPrice"]) <= 0.90
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert [o["instanceType"] for o in overrides] == ["g6.xlarge", "g6.2xlarge", "g5.xlarge"]
    template = r.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert "instanceMarketOptions" not in template  # the group's policy decides the market
    script = base64.b64decode(template["userData"]).decode()
    assert len(script.encode()) < AWS_USER_DATA_LIMIT and "DEV=''" in script
    assert r.one("aws:autoscaling/schedule:Schedule").inputs["desiredCapacity"] == 0
    assert r.outputs["address_kind"] == "ephemeral"


def test_aws_static_address_is_an_elastic_ip() -> None:
    r = variant_cached("aws", "node__address", "static")
    assert r.one("aws:ec2/eip:Eip").inputs["domain"] == "vpc"
    assert r.outputs["address_kind"] == "static"


# --- GCP ----------------------------------------------------------------------------------------------


def gcp() -> Rendered:
    return rendered(STACK_OF["gcp"])


def test_gcp_node_is_a_spot_vm_that_stops_and_is_never_restarted() -> None:
    instance = gcp().one("gcp:compute/instance:Instance").inputs
    scheduling = instance["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["preemptible"] is True
    assert scheduling["instanceTerminationAction"] == "STOP"
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert scheduling["automaticRestart"] is False
    assert scheduling["maxRunDuration"] == {"seconds": 30 * 3600}
    assert instance["machineType"] == "g2-standard-8"
    assert "guestAccelerators" not in instance  # the g2 machine type carries its L4
    assert instance["attachedDisks"][0]["deviceName"] == "spot-eval-cache"
    metadata = instance["metadata"]
    assert "kill -TERM" in metadata["shutdown-script"]
    assert "/dev/disk/by-id/google-spot-eval-cache" in metadata["startup-script"]


def test_gcp_n1_machine_gets_guest_accelerators() -> None:
    r = variant(
        "gcp",
        node__instance_type="n1-standard-8",
        node__gpu_type="nvidia-tesla-t4",
        grant__instance_types=None,
    )
    instance = r.one("gcp:compute/instance:Instance").inputs
    assert instance["guestAccelerators"] == [{"type": "nvidia-tesla-t4", "count": 1}]


def test_gcp_bucket_is_uniform_private_and_versioned() -> None:
    bucket = gcp().one("gcp:storage/bucket:Bucket").inputs
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["versioning"] == {"enabled": True}
    assert bucket["forceDestroy"] is False
    assert bucket["location"] == "US-CENTRAL1"


def test_gcp_service_account_reads_and_creates_objects_in_its_bucket_only() -> None:
    r = gcp()
    members = r.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert {m.inputs["role"] for m in members} == {
        "roles/storage.objectViewer",
        "roles/storage.objectCreator",
    }
    bucket_name = r.one("gcp:storage/bucket:Bucket").name
    assert all(m.inputs["bucket"] == bucket_name for m in members)
    email = r.one("gcp:compute/instance:Instance").inputs["serviceAccount"]["email"]
    assert all(m.inputs["member"] == f"serviceAccount:{email}" for m in members)
    assert not r.of_type("gcp:projects/iAMMember:IAMMember")


def test_gcp_preemptions_of_this_vm_are_sunk_into_a_retained_log_bucket() -> None:
    r = gcp()
    sink = r.one("gcp:logging/projectSink:ProjectSink").inputs
    assert 'protoPayload.methodName="compute.instances.preempted"' in sink["filter"]
    assert f'/instances/{r.outputs["node_ids"][0]}"' in sink["filter"]
    log_bucket = r.one("gcp:logging/projectBucketConfig:ProjectBucketConfig")
    assert log_bucket.retain_on_delete and log_bucket.inputs["retentionDays"] >= 365


def test_gcp_budget_needs_a_billing_account() -> None:
    assert not gcp().of_type("gcp:billing/budget:Budget")
    r = variant_cached("gcp", "gcp__billing_account", "01ABCD-23EF45-6789AB")
    budget = r.one("gcp:billing/budget:Budget").inputs
    assert budget["amount"]["specifiedAmount"] == {"currencyCode": "USD", "units": "40", "nanos": 0}
    # the Budget API takes the project number, read in the program from the project id
    assert budget["budgetFilter"]["projects"] == [f"projects/{MOCK_PROJECT_NUMBER}"]
    lookups = [c for c in r.calls if c.token == "gcp:organizations/getProject:getProject"]
    assert [c.args for c in lookups] == [{"projectId": "spot-eval-demo"}]
    provider = r.one("pulumi:providers:gcp")
    assert lookups[0].provider.startswith(f"{provider.urn}::")  # the stack's provider, not a default one


def test_gcp_on_demand_is_standard_provisioning() -> None:
    r = variant_cached("gcp", "node__market", "on_demand")
    scheduling = r.one("gcp:compute/instance:Instance").inputs["scheduling"]
    assert scheduling["provisioningModel"] == "STANDARD"
    assert scheduling["preemptible"] is False
    assert scheduling["maxRunDuration"] == {"seconds": 30 * 3600}  # the runtime rule holds on both markets


def test_gcp_pool_is_a_regional_managed_group_of_spot_vms() -> None:
    r = variant_cached("gcp", "node__count", 3)
    assert not r.of_type("gcp:compute/instance:Instance")
    template = r.one("gcp:compute/instanceTemplate:InstanceTemplate").inputs
    assert template["scheduling"]["provisioningModel"] == "SPOT"
    assert template["scheduling"]["instanceTerminationAction"] == "DELETE"
    group = r.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager").inputs
    assert group["targetSize"] == 3 and group["region"] == "us-central1"
    assert "instances/qwen7b-drill-gcp-gpu-" in r.one("gcp:logging/projectSink:ProjectSink").inputs["filter"]


# --- Azure --------------------------------------------------------------------------------------------


def azure() -> Rendered:
    return rendered(STACK_OF["azure"])


def test_azure_node_is_a_spot_vm_deallocated_on_eviction() -> None:
    vm = azure().one("azure-native:compute:VirtualMachine").inputs
    assert vm["priority"] == "Spot"
    assert vm["evictionPolicy"] == "Deallocate"
    assert vm["billingProfile"]["maxPrice"] == 0.60
    assert vm["scheduledEventsProfile"]["terminateNotificationProfile"]["enable"] is True
    assert vm["hardwareProfile"]["vmSize"] == "Standard_NC4as_T4_v3"
    assert vm["storageProfile"]["imageReference"] == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "latest",
    }
    assert vm["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    script = base64.b64decode(vm["osProfile"]["customData"]).decode()
    assert script.startswith("#!/bin/bash") and "/dev/disk/azure/scsi1/lun0" in script
    assert "AZURE_CLIENT_ID=22222222-2222-2222-2222-222222222222" in script
    assert vm["storageProfile"]["dataDisks"][0]["createOption"] == "Attach"


def test_azure_without_a_price_cap_bids_minus_one() -> None:
    r = variant_cached("azure", "grant__price_cap", None)
    # The workload's own grant must not exceed the stack's, so it loses its cap too.
    vm = r.one("azure-native:compute:VirtualMachine").inputs
    assert vm["billingProfile"]["maxPrice"] == -1


def test_azure_storage_is_private_https_tls12_versioned() -> None:
    r = azure()
    account = r.one("azure-native:storage:StorageAccount").inputs
    assert account["allowBlobPublicAccess"] is False
    assert account["enableHttpsTrafficOnly"] is True
    assert account["minimumTlsVersion"] == "TLS1_2"
    assert account["encryption"]["services"]["blob"]["enabled"] is True
    assert r.one("azure-native:storage:BlobServiceProperties").inputs["isVersioningEnabled"] is True
    container = r.one("azure-native:storage:BlobContainer").inputs
    assert container["publicAccess"] == "None"
    assert r.outputs["bucket_url"] == f"az://{container['containerName']}"
    assert container["containerName"] == account["accountName"]


def test_azure_identity_may_read_and_write_but_not_delete_blobs_of_its_container() -> None:
    r = azure()
    role = r.one("azure-native:authorization:RoleDefinition").inputs
    data_actions = role["permissions"][0]["dataActions"]
    assert data_actions and not [a for a in data_actions if "delete" in a.lower()]
    assignment = r.one("azure-native:authorization:RoleAssignment").inputs
    container = r.one("azure-native:storage:BlobContainer")
    assert assignment["scope"].endswith(container.name)
    assert assignment["principalType"] == "ServicePrincipal"


def test_azure_budget_and_eviction_alert() -> None:
    r = azure()
    budget = r.one("azure-native:consumption:Budget")
    assert budget.inputs["amount"] == 25
    assert budget.inputs["timePeriod"]["startDate"] == "2026-12-01T00:00:00Z"
    assert budget.ignore_changes == ("timePeriod",)
    emails = {e for n in budget.inputs["notifications"].values() for e in n["contactEmails"]}
    assert emails == {"eval-oncall@example.com"}
    alert = r.one("azure-native:monitor:ActivityLogAlert").inputs
    assert alert["condition"]["allOf"] == [{"field": "category", "equals": "ResourceHealth"}]
    assert alert["actions"]["actionGroups"]


def test_azure_pool_is_a_spot_scale_set_that_restores_capacity() -> None:
    r = variant_cached("azure", "node__count", 2)
    assert not r.of_type("azure-native:compute:VirtualMachine")
    scale_set = r.one("azure-native:compute:VirtualMachineScaleSet").inputs
    assert scale_set["sku"]["capacity"] == 2
    assert scale_set["virtualMachineProfile"]["priority"] == "Spot"
    assert scale_set["spotRestorePolicy"]["enabled"] is True
    assert r.outputs["address_kind"] == "ephemeral"


def test_azure_on_demand_is_regular_priority() -> None:
    vm = (
        variant_cached("azure", "node__market", "on_demand").one("azure-native:compute:VirtualMachine").inputs
    )
    assert vm["priority"] == "Regular"
    assert "evictionPolicy" not in vm and "billingProfile" not in vm


# --- Kubernetes ---------------------------------------------------------------------------------------


def kube() -> Rendered:
    return rendered(STACK_OF["k8s"])


def pod_spec(d: Declared) -> dict[str, Any]:
    spec: dict[str, Any] = d.inputs["spec"]["template"]["spec"]
    return spec


def test_kubernetes_episodes_job_ignores_disruptions_and_has_a_deadline() -> None:
    job = kube().one("kubernetes:batch/v1:Job")
    spec = job.inputs["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 1
    assert spec["activeDeadlineSeconds"] == 30 * 3600
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert rules[1] == {
        "action": "FailJob",
        "onExitCodes": {
            "containerName": "agent",
            "operator": "In",
            "values": [exits.BAD_INPUT, exits.HARNESS_ERRORS],
        },
    }
    assert len(rules) == 2  # exit 1 and 75 (store unreachable: transient) are retried, counted
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == 10  # GKE gives spot pods 15 s
    assert pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert pod["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
    env = pod["containers"][0]["env"][0]
    assert env["name"] == "POD_NAME" and env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_kubernetes_model_server_runs_on_a_spot_gpu_with_its_cache() -> None:
    r = kube()
    deployment = r.one("kubernetes:apps/v1:Deployment")
    pod = pod_spec(deployment)
    container = pod["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.11.0"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
    }
    assert deployment.inputs["spec"]["strategy"]["type"] == "Recreate"
    [claim] = [
        c for c in r.of_type("kubernetes:core/v1:PersistentVolumeClaim") if c.name.endswith("-weights-cache")
    ]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim.inputs["metadata"]["name"]
    service = r.one("kubernetes:core/v1:Service").inputs
    assert service["spec"]["ports"][0]["port"] == 8000


def test_kubernetes_agent_spool_outlives_the_pod_per_job_index() -> None:
    """What a pod spooled (a store outage, a notice) is uploaded by the next pod of its index."""
    r = kube()
    [claim] = [
        c for c in r.of_type("kubernetes:core/v1:PersistentVolumeClaim") if c.name.endswith("-agent-spool")
    ]
    assert claim.protect  # held, like the weights cache: a destroy of the compute keeps it
    assert claim.inputs["spec"]["accessModes"] == ["ReadWriteOnce"]  # one node: one pod at a time
    pod = pod_spec(kube().one("kubernetes:batch/v1:Job"))
    [volume] = [v for v in pod["volumes"] if v["name"] == "spool"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim.inputs["metadata"]["name"]
    container = pod["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "spool"]
    assert mount == {
        "name": "spool",
        "mountPath": "/var/lib/spot-eval/spool",
        "subPathExpr": "index-$(JOB_COMPLETION_INDEX)",
    }
    index = next(e for e in container["env"] if e["name"] == "JOB_COMPLETION_INDEX")
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    config = json.loads(r.one("kubernetes:core/v1:ConfigMap").inputs["data"]["agent.json"])
    assert "spool_dir" not in config  # the agent's default, /var/lib/spot-eval/spool, is the mount


def test_kubernetes_agent_gets_its_bundle_config_and_identity_from_the_cluster() -> None:
    r = kube()
    config_map = r.one("kubernetes:core/v1:ConfigMap").inputs
    assert set(config_map["data"]) == {"agent.json", "manifest.jsonl"}
    assert base64.b64decode(config_map["binaryData"]["agent-bundle.zip"])[:2] == b"PK"
    account = r.one("kubernetes:core/v1:ServiceAccount").inputs
    assert account["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "spot-eval-agent@spot-eval-demo.iam.gserviceaccount.com"
    }
    assert r.outputs["bucket_url"] == "gs://spot-eval-demo-results"


def test_kubernetes_on_demand_keeps_pods_off_spot_nodes() -> None:
    pod = pod_spec(variant_cached("k8s", "node__market", "on_demand").one("kubernetes:batch/v1:Job"))
    assert "nodeSelector" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"] == [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]


def test_kubernetes_flavours_fit_grace_to_their_notice() -> None:
    r = variant_cached("k8s", "k8s__flavour", "eks")
    pod = pod_spec(r.one("kubernetes:batch/v1:Job"))
    assert pod["nodeSelector"] == {"eks.amazonaws.com/capacityType": "SPOT"}
    assert pod["terminationGracePeriodSeconds"] == 115


def test_kubernetes_parallel_agents_share_one_server_and_one_shared_spool() -> None:
    r = variant("k8s", node__count=4, k8s__shared_spool_class="standard-rwx")
    spec = r.one("kubernetes:batch/v1:Job").inputs["spec"]
    assert spec["parallelism"] == spec["completions"] == 4
    assert r.one("kubernetes:apps/v1:Deployment").inputs["spec"]["replicas"] == 1
    claims = {
        c.name.removeprefix("qwen7b-drill-gke-"): c
        for c in r.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    }
    assert sorted(claims) == ["agent-spool", "agent-spool-shared", "weights-cache"]
    shared = claims["agent-spool-shared"]
    assert shared.protect and shared.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
    assert shared.inputs["spec"]["storageClassName"] == "standard-rwx"
    # the single node's claim is the same as with one node (an access mode is replace-only)
    assert claims["agent-spool"].inputs["spec"]["accessModes"] == ["ReadWriteOnce"]
    [volume] = [v for v in spec["template"]["spec"]["volumes"] if v["name"] == "spool"]
    assert volume["persistentVolumeClaim"]["claimName"] == shared.inputs["metadata"]["name"]


def test_kubernetes_pool_without_a_shared_spool_class_is_refused_naming_the_key() -> None:
    with pytest.raises(RenderError) as info:
        variant("k8s", node__count=2)
    assert str(info.value).startswith("stack config spot-eval:k8s.shared_spool_class: is required for a pool")


# --- no compute, bad config ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure", "k8s"])
def test_count_zero_keeps_the_bucket_and_declares_no_compute(provider: str) -> None:
    r = variant_cached(provider, "node__count", 0)
    assert r.outputs["node_ids"] == []
    assert not [d for d in r.resources if d.type in COMPUTE_TYPES]
    assert [d for d in r.resources if d.protect]  # the holds stay


@pytest.mark.parametrize(
    ("provider", "key", "value", "named"),
    [
        ("aws", "node__instance_type", "p5.48xlarge", "spot-eval:node.instance_type:"),
        ("gcp", "node__market", "preemptible", "spot-eval:node.market:"),
        ("azure", "node__max_price", 2.5, "spot-eval:node.max_price:"),
        ("k8s", "k8s__flavour", "openshift", "spot-eval:k8s.flavour:"),
    ],
)
def test_bad_config_fails_before_any_resource_naming_the_key(
    provider: str, key: str, value: Any, named: str
) -> None:
    with pytest.raises(RenderError) as info:
        variant(provider, **{key: value})
    assert str(info.value).startswith(f"stack config {named}")


def test_manifest_that_disagrees_with_the_workload_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RenderError) as info:
        variant("aws", workload__episodes=1999)
    assert "workload.episodes" in str(info.value)
