"""No AWS persistent spot request outlives the stack's instance (components/aws_spot_cleanup.py):
declared for a spot node, deleted before the instance it depends on; its delete cancels the request
and terminates any instance the request launched besides the stack's own. Run against moto's EC2."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from components.aws_spot_cleanup import SpotRequestCleanupProvider, cancel, request_of
from tests import servers
from tests.test_stacks import variant, variant_cached

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
DYNAMIC = "pulumi-python:dynamic:Resource"
REGION = "us-east-1"


@pytest.fixture
def ec2(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> Any:
    servers.moto_reset(moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.url)
    return boto3.client("ec2", region_name=REGION)


def _persistent_spot(ec2: Any) -> tuple[str, str]:
    image = ec2.describe_images()["Images"][0]["ImageId"]
    reply = ec2.request_spot_instances(
        Type="persistent", LaunchSpecification={"ImageId": image, "InstanceType": "g6.xlarge"}
    )
    request = reply["SpotInstanceRequests"][0]
    return str(request["SpotInstanceRequestId"]), str(request["InstanceId"])


def _state(ec2: Any, request_id: str) -> str:
    """The request's state; "cancelled" once cancelled (moto forgets a cancelled request)."""
    found = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    states = [str(r["State"]) for r in found if r["SpotInstanceRequestId"] == request_id]
    return states[0] if states else "cancelled"


def _instance_state(ec2: Any, instance_id: str) -> str:
    reply = ec2.describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_delete_cancels_the_request_and_leaves_the_stack_s_instance_to_pulumi(ec2: Any) -> None:
    request_id, instance_id = _persistent_spot(ec2)
    provider = SpotRequestCleanupProvider()
    created = provider.create({"instance_id": instance_id, "region": REGION, "request_id": None})
    assert created.id == f"spot-cleanup-{instance_id}"
    assert created.outs is not None and created.outs["request_id"] == request_id
    assert _state(ec2, request_id) == "active"
    provider.delete(created.id, dict(created.outs))
    assert _state(ec2, request_id) == "cancelled"
    assert _instance_state(ec2, instance_id) == "running"  # Pulumi terminates it next


def test_an_instance_the_request_launched_outside_the_stack_is_terminated(ec2: Any) -> None:
    request_id, launched = _persistent_spot(ec2)
    assert cancel(ec2, request_id, keep_instance="i-0stackinstance000") == [launched]
    assert _state(ec2, request_id) == "cancelled"
    assert _instance_state(ec2, launched) in ("shutting-down", "terminated")


def test_on_demand_instances_have_no_request_and_delete_is_a_no_op(ec2: Any) -> None:
    image = ec2.describe_images()["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    assert request_of(ec2, instance) == ""
    assert cancel(ec2, "", keep_instance=instance) == []


def test_a_new_instance_replaces_the_cleanup_delete_first() -> None:
    result = SpotRequestCleanupProvider().diff(
        "spot-cleanup-i-1", {"instance_id": "i-1", "region": REGION}, {"instance_id": "i-2", "region": REGION}
    )
    assert (result.changes, result.replaces, result.delete_before_replace) == (True, ["instance_id"], True)


def test_declared_for_a_spot_node_only_and_bound_to_its_instance() -> None:
    r = variant("aws")
    cleanups = [d for d in r.of_type(DYNAMIC) if d.name.endswith("-spot-request")]
    assert len(cleanups) == 1
    instance = r.one("aws:ec2/instance:Instance")
    assert cleanups[0].inputs["instance_id"] == r.outputs["node_ids"][0]
    assert cleanups[0].inputs["region"] == REGION
    assert instance.urn in cleanups[0].depends_on  # deleted before the instance, on every path
    on_demand = variant_cached("aws", "node__market", "on_demand")
    assert not [d for d in on_demand.of_type(DYNAMIC) if d.name.endswith("-spot-request")]
