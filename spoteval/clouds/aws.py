"""AWS EC2 control plane (boto3): spot price history, instance state, stop/start, FIS interruption.

Credentials, region and endpoint come from the standard environment as boto3 reads it
(`AWS_PROFILE`, `AWS_ACCESS_KEY_ID`, ..., `AWS_ENDPOINT_URL`); the region is the stack's.

- Price: `describe_spot_price_history` for the node's instance type and zone; the newest entry
  (`spoteval.apis.aws_spot`) is the effective price (`price_source` `api`). On-demand nodes, or no
  history: the configured price.
- Stop/start: `stop_instances` / `start_instances`, then polling `describe_instances`. A spot
  instance that EC2 stopped by an interruption can only be restarted by EC2 (persistent request):
  `start()` then waits for EC2 to bring it back. A stop by the stack's idle alarm or runtime
  schedule disables the persistent request until `start_instances`, which this plane calls; the
  start also sets the idle alarm (`spot-eval-RUN_ID-idle`) back to OK.
- Preemption: the FIS experiment template given in the options (`AwsOptions`) (action
  `aws:ec2:send-spot-instance-interruptions`), then waiting until the instance is stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from spoteval.apis import aws_spot
from spoteval.clouds.base import (
    PRIVATE_ADDRESS_KINDS,
    CapacityError,
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    StackOutputs,
    configured_price,
    provider_options,
    wait_for,
)
from spoteval.price import Price
from spoteval.providers import AWS
from spoteval.providers import aws as aws_facts

if TYPE_CHECKING:
    from mypy_boto3_ec2.client import EC2Client
    from mypy_boto3_ec2.type_defs import InstanceTypeDef, SpotPriceTypeDef

_STATES: Final = {
    "pending": "pending",
    "running": "running",
    "stopping": "stopping",
    "stopped": "stopped",
    "shutting-down": "terminated",
    "terminated": "terminated",
}
#: StateReason codes of a spot instance that EC2 stopped by an interruption (only EC2 restarts it).
_INTERRUPTED: Final = ("Server.SpotInstanceShutdown", "Server.SpotInstanceTermination")
#: error codes of a start that mean no capacity (or quota) now (spoteval/providers/aws.py)
CAPACITY_CODES: Final = aws_facts.CAPACITY_CODES


@dataclass(frozen=True)
class AwsOptions:
    """The aws plane's own options: `fis_template_id`, the FIS experiment template that sends the
    spot interruption (`simulate_preemption`)."""

    fis_template_id: str | None = None

    @classmethod
    def parse(cls, options: PlaneOptions) -> AwsOptions:
        return provider_options(cls, options, "aws")


def _error(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".strip()
    return str(exc)


def spot_price(history: Sequence[SpotPriceTypeDef], instance_type: str, zone: str | None) -> Price | None:
    """The newest Linux spot price for the type (and zone) in a price history, or None."""
    found = aws_spot.newest(aws_spot.from_sdk(history), instance_type, zone)
    if found is None:
        return None
    return Price(
        found.per_hour,
        "USD",
        "api",
        {"zone": found.zone or None, "since": found.timestamp or None, "product": found.product},
    )


class AwsPlane:
    provider = "aws"
    restarts_itself = AWS.restarts_itself
    can_stay_stopped = AWS.can_stay_stopped

    def __init__(
        self,
        outputs: StackOutputs,
        node: str,
        config: PlaneOptions,
        ec2: EC2Client,
        fis: Any = None,
        *,
        cloudwatch: Any = None,
    ) -> None:
        if not node.startswith("i-"):
            raise ControlPlaneError(
                f"aws node {node!r} is not an instance id (i-...): a pool's Auto Scaling group replaces "
                "stopped instances, so restarts are measured on a single-node stack"
            )
        self.outputs = outputs
        self.node = node
        self.config = config
        self.own = AwsOptions.parse(config)
        self.ec2 = ec2
        self.fis = fis
        self.cloudwatch = cloudwatch

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> AwsPlane:
        own = AwsOptions.parse(config)
        try:
            session = boto3.session.Session(region_name=outputs.region)
            ec2 = session.client("ec2")
            fis = session.client("fis") if own.fis_template_id else None
            cloudwatch = session.client("cloudwatch")
        except BotoCoreError as exc:
            raise ControlPlaneError(f"aws {outputs.region}: cannot create the EC2 client: {exc}") from None
        return cls(outputs, node, config, ec2, fis, cloudwatch=cloudwatch)

    # --- reading ----------------------------------------------------------------------------

    def _describe(self) -> InstanceTypeDef:
        try:
            reply = self.ec2.describe_instances(InstanceIds=[self.node])
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"aws describe_instances {self.node}: {_error(exc)}") from None
        for reservation in reply.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if instance.get("InstanceId") == self.node:
                    return instance
        raise ControlPlaneError(f"aws describe_instances {self.node}: no such instance")

    def state(self) -> NodeState:
        instance = self._describe()
        raw = instance.get("State", {}).get("Name", "unknown")
        reason = instance.get("StateReason", {})
        return NodeState(
            _STATES.get(raw, "unknown"),
            raw,
            {
                "state_reason": reason.get("Code"),
                "lifecycle": instance.get("InstanceLifecycle"),
                # stopped by an interruption: EC2 itself starts it again when capacity returns
                "provider_restarts": reason.get("Code") in _INTERRUPTED,
            },
        )

    def address(self) -> str | None:
        instance = self._describe()
        private = instance.get("PrivateIpAddress")
        if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
            return private
        return instance.get("PublicIpAddress") or private

    def _zone(self) -> str | None:
        if self.outputs.zone:
            return self.outputs.zone
        return self._describe().get("Placement", {}).get("AvailabilityZone")

    def price_now(self) -> Price:
        if self.outputs.market != "spot":
            return configured_price(self.config, reason="on-demand price is not read from an API")
        zone = self._zone()
        kwargs: dict[str, Any] = {
            "InstanceTypes": [self.outputs.instance_type],
            "ProductDescriptions": list(aws_spot.PRODUCTS),
            "StartTime": datetime.now(timezone.utc),
        }
        if zone:
            kwargs["AvailabilityZone"] = zone
        try:
            history = self.ec2.describe_spot_price_history(**kwargs).get("SpotPriceHistory", [])
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(
                f"aws describe_spot_price_history {self.outputs.instance_type} in {zone}: {_error(exc)}"
            ) from None
        return spot_price(history, self.outputs.instance_type, zone) or configured_price(
            self.config, reason=f"no spot price history for {self.outputs.instance_type} in {zone}"
        )

    # --- acting -----------------------------------------------------------------------------

    def _wait(self, want: str, timeout_s: float, what: str) -> NodeState:
        return wait_for(self.state, {want}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)

    def stop(self, timeout_s: float) -> None:
        what = f"aws stop {self.node}"
        if self.state().stopped:
            return
        try:
            self.ec2.stop_instances(InstanceIds=[self.node])
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"{what}: {_error(exc)}") from None
        self._wait("stopped", timeout_s, what)

    def start(self, timeout_s: float) -> None:
        what = f"aws start {self.node}"
        current = self.state()
        if current.running:
            return
        if current.status == "stopping":
            current = self._wait("stopped", timeout_s, what)
        if current.status == "stopped":
            try:
                self.ec2.start_instances(InstanceIds=[self.node])
            except (ClientError, BotoCoreError) as exc:
                if current.details.get("state_reason") not in _INTERRUPTED:
                    code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
                    error = CapacityError if code in CAPACITY_CODES else ControlPlaneError
                    raise error(f"{what}: {_error(exc)}") from None
                # Stopped by an interruption: only EC2 restarts it, when capacity returns.
        self._wait("running", timeout_s, what)
        self._rearm_idle_alarm()

    def _rearm_idle_alarm(self) -> None:
        """The stack's idle alarm acts only when it enters ALARM; after it stopped the node it stays
        there until the agent publishes again. Back to OK at a start, so that an agent that never
        comes back stops the node again after the idle minutes. No alarm (pools, no idle rule, no
        permission): nothing to do."""
        if self.cloudwatch is None:
            return
        try:
            self.cloudwatch.set_alarm_state(
                AlarmName=f"spot-eval-{self.outputs.run_id}-idle",
                StateValue="OK",
                StateReason="started by the operator: the next idle period stops it again",
            )
        except (ClientError, BotoCoreError):
            return

    def simulate_preemption(self, timeout_s: float) -> str:
        what = f"aws preempt {self.node}"
        template = self.own.fis_template_id
        if not template or self.fis is None:
            raise ControlPlaneError(
                f"{what}: needs an AWS FIS experiment template with the action "
                "aws:ec2:send-spot-instance-interruptions (--fis-template ID)"
            )
        try:
            reply = self.fis.start_experiment(experimentTemplateId=template, clientToken=str(uuid.uuid4()))
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"{what}: FIS start_experiment {template}: {_error(exc)}") from None
        self._wait("stopped", timeout_s, what)
        experiment = reply.get("experiment", {}).get("id")
        return f"fis:{experiment or template}"
