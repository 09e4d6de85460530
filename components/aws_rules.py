"""AWS stop rules and server-side capture of interruption events (the rest of the stack: components/aws.py).

Stop rules: max runtime (a one-shot EventBridge Scheduler stop), idle (an alarm on the agent's
has-work metric with the EC2 stop action; never CPU) and budget (AWS Budgets with e-mail alerts).
Event capture: EventBridge rules sending the node's interruption, rebalance and state-change events
to a CloudWatch Logs group.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import pulumi
from pulumi_aws import autoscaling, budgets, cloudwatch, iam, scheduler

from components.aws_spot_cleanup import SpotRequestCleanup
from components.base import BuildContext, child, held
from components.settings import Settings
from spoteval.provider_rules import AWS_AGENT_METRIC

INTERRUPTION_EVENTS: Final = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
    "state": "EC2 Instance State-change Notification",
}
#: the idle alarm's period: the agent publishes its has-work metric several times in each
IDLE_PERIOD_S: Final = 300


@dataclass(frozen=True)
class IdleAlarm:
    """The idle stop rule: the agent's has-work metric (spoteval/agent/aws_metric.py) stays below 1
    for every period of `idle_minutes`, missing data counting as no work (an agent that is gone)."""

    period_s: int
    evaluation_periods: int
    namespace: str = AWS_AGENT_METRIC.namespace
    metric: str = AWS_AGENT_METRIC.metric
    statistic: str = "Maximum"
    threshold: float = 1.0
    comparison: str = "LessThanThreshold"
    treat_missing_data: str = "breaching"

    @property
    def datapoints_to_alarm(self) -> int:
        return self.evaluation_periods

    def fires(self, datapoints: Sequence[tuple[datetime, float]], at: datetime) -> bool:
        """Whether CloudWatch would hold this alarm in ALARM at `at`, given the metric's datapoints:
        each of the last `evaluation_periods` periods breaches when its maximum is below the
        threshold or it has no datapoint."""
        breaching = 0
        for i in range(self.evaluation_periods):
            end = at - timedelta(seconds=i * self.period_s)
            start = end - timedelta(seconds=self.period_s)
            values = [v for t, v in datapoints if start < t <= end]
            if not values or max(values) < self.threshold:
                breaching += 1
        return breaching >= self.datapoints_to_alarm


def idle_alarm(idle_s: float, period_s: int = IDLE_PERIOD_S) -> IdleAlarm:
    return IdleAlarm(period_s=period_s, evaluation_periods=max(1, math.ceil(idle_s / period_s)))


def idle_alarm_name(run_id: str) -> str:
    """The alarm's name: fixed, so the operator can find it (spoteval/clouds/aws.py resets it to OK
    when it starts the node, so that the next idle period stops the node again)."""
    return f"spot-eval-{run_id}-idle"


def iam_policy(statements: list[dict[str, object]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def assume_role(service: str) -> str:
    return iam_policy([{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}])


# --- stop rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopRulesArgs:
    settings: Settings
    context: BuildContext
    instance_id: pulumi.Input[str] | None  # single node
    group_name: pulumi.Input[str] | None  # pool


class StopRules(pulumi.ComponentResource):
    """Max runtime (a one-shot stop at first `up` + the grant's runtime), idle (an alarm on the agent's
    has-work metric with the EC2 stop action), budget (AWS Budgets with e-mail alerts). The price
    cap is the spot max price. A stop by the schedule or the alarm disables the persistent spot
    request until the instance is started again: the operator starts it when work remains."""

    def __init__(self, name: str, args: StopRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:StopRules", name, None, opts)
        s = args.settings
        stop = s.stop
        if stop.max_runtime_s is not None:
            at = (args.context.now + timedelta(seconds=stop.max_runtime_s)).strftime("%Y-%m-%dT%H:%M:%S")
            # The time is fixed when the rule is first created; later `up`s leave it alone.
            if args.instance_id is not None:
                role = iam.Role(
                    f"{name}-stopper",
                    assume_role_policy=assume_role("scheduler.amazonaws.com"),
                    opts=child(self),
                )
                iam.RolePolicy(
                    f"{name}-stopper",
                    role=role.id,
                    policy=pulumi.Output.from_input(args.instance_id).apply(
                        lambda i: iam_policy(
                            [
                                {
                                    "Effect": "Allow",
                                    "Action": ["ec2:StopInstances"],
                                    "Resource": [f"arn:aws:ec2:{s.region}:*:instance/{i}"],
                                }
                            ]
                        )
                    ),
                    opts=child(self),
                )
                scheduler.Schedule(
                    f"{name}-max-runtime",
                    description=f"spot-eval {s.run_id}: stop {stop.max_runtime_hours} h after first up",
                    schedule_expression=f"at({at})",
                    schedule_expression_timezone="UTC",
                    flexible_time_window=scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
                    action_after_completion="NONE",
                    target=scheduler.ScheduleTargetArgs(
                        arn="arn:aws:scheduler:::aws-sdk:ec2:stopInstances",
                        role_arn=role.arn,
                        input=pulumi.Output.from_input(args.instance_id).apply(
                            lambda i: json.dumps({"InstanceIds": [i]})
                        ),
                    ),
                    opts=pulumi.ResourceOptions(parent=self, ignore_changes=["schedule_expression"]),
                )
            if args.group_name is not None:
                autoscaling.Schedule(
                    f"{name}-max-runtime",
                    scheduled_action_name=f"{s.run_id}-max-runtime",
                    autoscaling_group_name=args.group_name,
                    start_time=f"{at}Z",
                    min_size=0,
                    max_size=0,
                    desired_capacity=0,
                    opts=pulumi.ResourceOptions(parent=self, ignore_changes=["start_time"]),
                )
        if args.instance_id is not None and s.node.spot:
            # No persistent spot request outlives the instance (components/aws_spot_cleanup.py).
            SpotRequestCleanup(
                f"{name}-spot-request", instance_id=args.instance_id, region=s.region, opts=child(self)
            )
        if stop.idle_s is not None and args.instance_id is not None:
            alarm = idle_alarm(stop.idle_s)
            cloudwatch.MetricAlarm(
                f"{name}-idle",
                name=idle_alarm_name(s.run_id),
                alarm_description=f"spot-eval {s.run_id}: stop after {stop.idle_minutes} minutes without "
                "work or without the agent (its HasWork metric, missing data counts as no work)",
                namespace=alarm.namespace,
                metric_name=alarm.metric,
                dimensions={AWS_AGENT_METRIC.dimension: args.instance_id},
                statistic=alarm.statistic,
                period=alarm.period_s,
                evaluation_periods=alarm.evaluation_periods,
                datapoints_to_alarm=alarm.datapoints_to_alarm,
                threshold=alarm.threshold,
                comparison_operator=alarm.comparison,
                treat_missing_data=alarm.treat_missing_data,
                alarm_actions=[f"arn:aws:automate:{s.region}:ec2:stop"],
                opts=child(self),
            )
        if s.grant.budget is not None:
            budgets.Budget(
                f"{name}-budget",
                budget_type="COST",
                limit_amount=f"{s.grant.budget:.2f}",
                limit_unit=s.grant.currency,
                time_unit="ANNUALLY",
                cost_filters=[
                    budgets.BudgetCostFilterArgs(
                        name="TagKeyValue", values=[f"user:spot-eval-run${s.run_id}"]
                    )
                ],
                notifications=[
                    budgets.BudgetNotificationArgs(
                        comparison_operator="GREATER_THAN",
                        notification_type=kind,
                        threshold=threshold,
                        threshold_type="PERCENTAGE",
                        subscriber_email_addresses=list(stop.notify_emails),
                    )
                    for kind, threshold in (("ACTUAL", 80.0), ("ACTUAL", 100.0), ("FORECASTED", 100.0))
                ],
                opts=child(self),
            )
        self.register_outputs({})


# --- event capture ------------------------------------------------------------------------------


def _event_pattern(detail_type: str, instance_id: str | None) -> str:
    pattern: dict[str, object] = {"source": ["aws.ec2"], "detail-type": [detail_type]}
    if instance_id is not None:
        pattern["detail"] = {"instance-id": [instance_id]}
    return json.dumps(pattern, sort_keys=True)


@dataclass(frozen=True)
class EventCaptureArgs:
    settings: Settings
    instance_id: pulumi.Input[str] | None  # None for a pool: every instance of the region is captured


class EventCapture(pulumi.ComponentResource):
    """EventBridge rules sending this node's interruption, rebalance and state-change events to a
    CloudWatch Logs group that outlives the node."""

    def __init__(self, name: str, args: EventCaptureArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:EventCapture", name, None, opts)
        s = args.settings
        self.log_group = cloudwatch.LogGroup(
            f"{name}-events",
            name=f"/spot-eval/{s.run_id}/ec2-events",
            retention_in_days=400,
            # a record of interruptions: held like the results
            opts=held(self),
        )
        cloudwatch.LogResourcePolicy(
            f"{name}-events",
            policy_name=f"spot-eval-{s.run_id}-events",
            policy_document=self.log_group.arn.apply(
                lambda arn: iam_policy(
                    [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": ["events.amazonaws.com", "delivery.logs.amazonaws.com"]},
                            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                            "Resource": [f"{arn}:*"],
                        }
                    ]
                )
            ),
            opts=child(self),
        )
        instance = pulumi.Output.from_input(args.instance_id) if args.instance_id is not None else None
        # The log group (retained, a fixed name) is declared whatever node.count, so a stop and a
        # resume never drop it from the stack and create it again; rules only while a node runs.
        for short, detail_type in INTERRUPTION_EVENTS.items() if s.node.count >= 1 else ():
            pattern: pulumi.Output[str] | str
            if instance is not None:
                pattern = instance.apply(functools.partial(_event_pattern, detail_type))
            else:
                pattern = _event_pattern(detail_type, None)
            rule = cloudwatch.EventRule(
                f"{name}-{short}",
                description=f"spot-eval {s.run_id}: {detail_type}",
                event_pattern=pattern,
                opts=child(self),
            )
            cloudwatch.EventTarget(
                f"{name}-{short}", rule=rule.name, arn=self.log_group.arn, opts=child(self)
            )
        self.register_outputs({"log_group": self.log_group.name})
