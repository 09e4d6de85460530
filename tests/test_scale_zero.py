"""Scaling a pool to zero from its node (spoteval/agent/scale_zero.py): an Auto Scaling group on
moto's server, and a managed instance group, a scale set and the Kubernetes model server's Deployment
on a loopback fake that keeps what each call sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from spoteval.agent.__main__ import main
from spoteval.agent.config import ConfigError, parse
from spoteval.agent.scale_zero import ScaleTarget, parse_target, scale_to_zero
from tests import servers
from tests.conftest import StoreTarget
from tests.fake_api import FakeApi, Reply, Request
from tests.fake_metadata import (
    AgentProcess,
    agent_config,
    cleanup_tagged,
    start_agent,
    write_config,
    write_manifest,
)

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    def handler(request: Request) -> Reply:
        if request.path.endswith("/token"):
            return 200, {"access_token": "tok-1", "expires_in": 3600}, {}
        return 200, {"name": "op-1"}, {}

    fake = FakeApi(handler)
    yield fake
    fake.close()


def test_an_auto_scaling_group_is_set_to_zero_min_and_desired(moto_server: servers.Server) -> None:
    kw: dict[str, Any] = {"endpoint_url": moto_server.url, "region_name": "us-east-1", **_boto(CREDS)}
    ec2, asg = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="lt-r1", LaunchTemplateData={"ImageId": image, "InstanceType": "t3.micro"}
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName="r1-pool",
        LaunchTemplate={"LaunchTemplateName": "lt-r1"},
        MinSize=2,
        MaxSize=4,
        DesiredCapacity=3,
        AvailabilityZones=["us-east-1a"],
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName="other-pool",
        LaunchTemplate={"LaunchTemplateName": "lt-r1"},
        MinSize=1,
        MaxSize=2,
        DesiredCapacity=1,
        AvailabilityZones=["us-east-1a"],
    )
    target = ScaleTarget("aws_asg", "r1-pool", region="us-east-1", endpoint=moto_server.url)
    assert scale_to_zero(target, environ=CREDS) == "aws_asg r1-pool scaled to zero"
    groups = {
        g["AutoScalingGroupName"]: (g["MinSize"], g["DesiredCapacity"], g["MaxSize"])
        for g in asg.describe_auto_scaling_groups()["AutoScalingGroups"]
    }
    assert groups == {"r1-pool": (0, 0, 4), "other-pool": (1, 1, 2)}  # its own group, nothing else


def test_a_missing_group_is_an_error_not_a_crash(moto_server: servers.Server) -> None:
    target = ScaleTarget("aws_asg", "no-such-pool", region="us-east-1", endpoint=moto_server.url)
    with pytest.raises(OSError, match="aws_asg no-such-pool: answered 400"):
        scale_to_zero(target, environ=CREDS)


def test_a_managed_instance_group_is_resized_to_zero_with_the_vms_token(api: FakeApi) -> None:
    target = ScaleTarget("gcp_mig", "r1-gpu", region="us-central1", project="p1", endpoint=api.url)
    assert scale_to_zero(target, metadata_url=api.url) == "gcp_mig r1-gpu scaled to zero"
    token, resize = api.requests
    assert (token.method, token.path) == (
        "GET",
        "/computeMetadata/v1/instance/service-accounts/default/token",
    )
    assert token.headers["Metadata-Flavor"] == "Google"
    assert (resize.method, resize.path, dict(resize.query)) == (
        "POST",
        "/compute/v1/projects/p1/regions/us-central1/instanceGroupManagers/r1-gpu/resize",
        {"size": "0"},
    )
    assert resize.headers["Authorization"] == "Bearer tok-1"


def test_a_scale_set_is_patched_to_capacity_zero_with_the_managed_identitys_token(api: FakeApi) -> None:
    target = ScaleTarget("azure_vmss", "r1-vmss", subscription="s1", resource_group="rg1", endpoint=api.url)
    assert scale_to_zero(target, metadata_url=api.url) == "azure_vmss r1-vmss scaled to zero"
    token, patch = api.requests
    assert (token.path, dict(token.query)) == (
        "/metadata/identity/oauth2/token",
        {"api-version": "2018-02-01", "resource": "https://management.azure.com/"},
    )
    assert token.headers["Metadata"] == "true"
    assert (patch.method, patch.path, dict(patch.query), patch.body) == (
        "PATCH",
        "/subscriptions/s1/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachineScaleSets/r1-vmss",
        {"api-version": "2024-07-01"},
        {"sku": {"capacity": 0}},
    )
    assert patch.headers["Authorization"] == "Bearer tok-1"


def test_the_model_servers_deployment_is_scaled_to_zero_replicas(api: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    target = ScaleTarget("k8s_deployment", "r1-server", namespace="evals", endpoint=api.url)
    env = {"SPOTEVAL_K8S_TOKEN_FILE": str(token)}
    assert scale_to_zero(target, environ=env) == "k8s_deployment r1-server scaled to zero"
    [patch] = api.requests
    assert (patch.method, patch.path, patch.body) == (
        "PATCH",
        "/apis/apps/v1/namespaces/evals/deployments/r1-server/scale",
        {"spec": {"replicas": 0}},
    )
    assert patch.headers["Authorization"] == "Bearer sa-token"
    assert patch.headers["Content-Type"] == "application/merge-patch+json"


def test_a_refusal_names_the_group_and_the_status(tmp_path: Path) -> None:
    fake = FakeApi(lambda r: (200, {"access_token": "t"}, {}) if "token" in r.path else (403, {"e": 1}, {}))
    try:
        target = ScaleTarget("gcp_mig", "r1-gpu", region="r", project="p", endpoint=fake.url)
        with pytest.raises(OSError, match="gcp_mig r1-gpu: answered 403"):
            scale_to_zero(target, metadata_url=fake.url)
    finally:
        fake.close()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"engine": "nomad", "name": "x"},
            "engine: must be one of aws_asg, gcp_mig, azure_vmss, k8s_deployment",
        ),
        ({"engine": "aws_asg", "name": "x"}, "aws_asg needs region"),
        ({"engine": "gcp_mig", "name": "x", "zone": "a"}, "unknown key zone"),
        ({"engine": "k8s_deployment", "name": 3, "namespace": "n"}, "name: must be a string, got 3"),
    ],
)
def test_bad_targets_are_refused_with_one_line(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_target(raw)
    assert str(refused.value).startswith(message)


def test_the_agent_config_takes_the_target_in_its_pool_section() -> None:
    base = {
        "run_id": "r1",
        "store": "file:///tmp/x",
        "node": {"id": "n1", "provider": "aws", "region": "us-east-1", "zone": "us-east-1a"},
        "server": {"url": "http://127.0.0.1:8000", "command": ["true"]},
        "episodes": {"command": ["true", "{output}"]},
    }
    group = {"engine": "aws_asg", "name": "r1-pool", "region": "us-east-1"}
    config = parse({**base, "pool": {"scale_to_zero": group}})
    assert config.pool is not None
    assert config.pool.scale_to_zero == ScaleTarget("aws_asg", "r1-pool", region="us-east-1")
    assert config.pool.claims() == {"batch": 16, "renew_s": 10.0, "expiry_s": 45.0}
    with pytest.raises(ConfigError, match="pool: scale_to_zero: aws_asg needs name"):
        parse({**base, "pool": {"scale_to_zero": {"engine": "aws_asg", "region": "us-east-1"}}})


def _boto(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


def test_the_nodes_of_a_pool_that_find_the_run_done_ask_the_engine_for_zero_once_each(
    s3_target: StoreTarget, api: FakeApi, tmp_path: Path
) -> None:
    ids = [f"e{i:02d}" for i in range(12)]
    group = {"engine": "gcp_mig", "name": "r1-pool", "project": "p1", "region": "r1", "endpoint": api.url}
    pool = {"batch": 4, "renew_s": 0.5, "expiry_s": 5.0, "scale_to_zero": group}
    agents: list[AgentProcess] = []
    try:
        for node in ("a", "b"):
            state = tmp_path / node
            state.mkdir()
            config = agent_config(
                s3_target.url, s3_target.options, "sz1", state, node=node, pool=pool, metadata_url=api.url
            )
            path = write_config(state / "agent.json", config)
            assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
            agents.append(start_agent(path, state))
        for agent in agents:
            assert agent.wait(120) == 0, agent.stderr()
    finally:
        for agent in agents:
            cleanup_tagged(agent)
    resizes = api.calls("POST", "/resize")
    assert [(r.path, dict(r.query)) for r in resizes] == [
        ("/compute/v1/projects/p1/regions/r1/instanceGroupManagers/r1-pool/resize", {"size": "0"})
    ] * 2
    assert all("gcp_mig r1-pool scaled to zero" in agent.stderr() for agent in agents)
