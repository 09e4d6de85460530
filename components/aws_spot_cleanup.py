"""A Pulumi dynamic resource that leaves no AWS persistent spot request behind the stack's instance.

A persistent spot request outlives its instance: terminating the instance (a replace, a flip of
`node.market`, `node.count: 0`, `pulumi destroy`) leaves the request open, and EC2 then launches a
new instance outside the stack, with no cache disk, alarm or schedule. The AWS provider's own
clean-up on delete is not dependable (hashicorp/terraform-provider-aws#38142: the request stays;
spoteval/provider_rules.py `PERMISSION_FACTS["aws_cancel_request_keeps_instance"]`).

`SpotRequestCleanup` depends on the instance, so Pulumi deletes it first, whenever the instance is
deleted or replaced: its delete cancels the instance's spot request (which does not terminate the
instance: Pulumi does that next) and terminates any instance the request launched besides the
declared one. Create only records the request's id. It runs with the deployer's AWS credentials
(boto3's standard chain, `AWS_ENDPOINT_URL` honoured), in the stack's region.
"""

from __future__ import annotations

from typing import Any

import boto3
import pulumi
import pulumi.dynamic as dyn
from botocore.exceptions import BotoCoreError, ClientError


def _ec2(region: str) -> Any:
    return boto3.session.Session(region_name=region).client("ec2")


def request_of(ec2: Any, instance_id: str) -> str:
    """The spot request that launched `instance_id` ("" for an on-demand instance): the instance's
    SpotInstanceRequestId, else the request whose `instance-id` filter names it."""
    reply = ec2.describe_instances(InstanceIds=[instance_id])
    for reservation in reply.get("Reservations", []):
        for instance in reservation.get("Instances", []):
            if instance.get("SpotInstanceRequestId"):
                return str(instance["SpotInstanceRequestId"])
    found = ec2.describe_spot_instance_requests(Filters=[{"Name": "instance-id", "Values": [instance_id]}])
    requests = found.get("SpotInstanceRequests", [])
    return str(requests[0]["SpotInstanceRequestId"]) if requests else ""


def cancel(ec2: Any, request_id: str, keep_instance: str) -> list[str]:
    """Cancel the request; terminate every instance it launched except `keep_instance` (Pulumi's own,
    which Pulumi terminates itself). Returns the instances terminated here."""
    if not request_id:
        return []
    try:
        requests = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "InvalidSpotInstanceRequestID.NotFound":
            return []
        raise
    launched = {
        str(r["InstanceId"])
        for r in requests.get("SpotInstanceRequests", [])
        if r.get("InstanceId") and r["InstanceId"] != keep_instance
    }
    ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[request_id])
    if launched:
        ec2.terminate_instances(InstanceIds=sorted(launched))
    return sorted(launched)


class SpotRequestCleanupProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        instance_id, region = str(props["instance_id"]), str(props["region"])
        try:
            request_id = request_of(_ec2(region), instance_id)
        except (ClientError, BotoCoreError) as exc:
            raise RuntimeError(f"aws describe_instances {instance_id}: {exc}") from None
        return dyn.CreateResult(id_=f"spot-cleanup-{instance_id}", outs={**props, "request_id": request_id})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        changed = [k for k in ("instance_id", "region") if olds.get(k) != news.get(k)]
        return dyn.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        instance_id, region = str(props["instance_id"]), str(props["region"])
        try:
            cancel(_ec2(region), str(props.get("request_id") or ""), keep_instance=instance_id)
        except (ClientError, BotoCoreError) as exc:
            raise RuntimeError(f"aws cancel the spot request of {instance_id}: {exc}") from None


class SpotRequestCleanup(dyn.Resource):
    """Cancels the instance's persistent spot request when the instance goes (module docstring)."""

    request_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        instance_id: pulumi.Input[str],
        region: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"instance_id": instance_id, "region": region, "request_id": None}
        super().__init__(SpotRequestCleanupProvider(), name, props, opts)
