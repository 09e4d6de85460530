"""Azure stop rules and server-side capture of evictions (the rest of the stack: components/azure.py).

Stop rules: a consumption budget with e-mail alerts, and Azure's auto-shutdown (deallocate) at the
max runtime when it ends within the first day. Azure has no provider-side stop on a metric: idle
and done are the agent's and the operator's (spoteval/operate/decide.py).
Event capture: an activity log alert on the node's Resource Health events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Final

import pulumi
from pulumi_azure_native import consumption, devtestlab, monitor

from components.base import BuildContext, child
from components.settings import Settings

# --- stop rules ---------------------------------------------------------------------------------


#: the longest max runtime Azure's auto-shutdown can enforce: it recurs daily at a time of day
AUTO_SHUTDOWN_MAX_S: Final = 24 * 3600


@dataclass(frozen=True)
class StopRulesArgs:
    settings: Settings
    context: BuildContext
    resource_group: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    #: the single node's VM (id, name); None for a scale set or no compute
    vm: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None


def auto_shutdown_time(now: datetime, max_runtime_s: float) -> str | None:
    """The daily auto-shutdown time (HHMM, UTC) that stops the VM `max_runtime_s` after `now`, or
    None when the runtime does not end within the first day (a daily schedule would stop it early)."""
    if max_runtime_s >= AUTO_SHUTDOWN_MAX_S:
        return None
    return (now + timedelta(seconds=max_runtime_s)).astimezone(timezone.utc).strftime("%H%M")


class StopRules(pulumi.ComponentResource):
    """Budget: a consumption budget on the resource group with e-mail alerts at 80 % and 100 %.
    Max runtime: Azure's auto-shutdown (a daily deallocation at a time of day) when the runtime ends
    within the first day, else the agent and the operator. Idle and done: the agent and the operator
    (Azure has no stop on a metric). The price cap is the Spot max price. An OS shutdown does not
    deallocate an Azure VM, so the agent exits instead of powering off, and the operator
    deallocates it."""

    def __init__(self, name: str, args: StopRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:StopRules", name, None, opts)
        s = args.settings
        at = (
            None
            if s.stop.max_runtime_s is None
            else auto_shutdown_time(args.context.now, s.stop.max_runtime_s)
        )
        if at is not None and args.vm is not None:
            vm_id, vm_name = args.vm
            # Azure's auto-shutdown deallocates the VM daily at this time; the time is fixed when the
            # schedule is first created (the first day is the run's max runtime).
            devtestlab.GlobalSchedule(
                f"{name}-max-runtime",
                name=pulumi.Output.concat("shutdown-computevm-", vm_name),
                resource_group_name=args.resource_group,
                location=s.region,
                status="Enabled",
                task_type="ComputeVmShutdownTask",
                daily_recurrence=devtestlab.DayDetailsArgs(time=at),
                time_zone_id="UTC",
                target_resource_id=vm_id,
                notification_settings=devtestlab.NotificationSettingsArgs(status="Disabled"),
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["dailyRecurrence"]),
            )
        if s.grant.budget is not None:
            start = args.context.now.strftime("%Y-%m-01T00:00:00Z")
            consumption.Budget(
                f"{name}-budget",
                budget_name=f"spot-eval-{s.run_id}",
                scope=args.resource_group_id,
                amount=s.grant.budget,
                category="Cost",
                time_grain="Annually",
                time_period=consumption.BudgetTimePeriodArgs(start_date=start),
                notifications={
                    key: consumption.NotificationArgs(
                        enabled=True,
                        operator="GreaterThan",
                        threshold=threshold,
                        threshold_type=kind,
                        contact_emails=list(s.stop.notify_emails),
                    )
                    for key, threshold, kind in (
                        ("actual80", 80.0, "Actual"),
                        ("actual100", 100.0, "Actual"),
                        ("forecast100", 100.0, "Forecasted"),
                    )
                },
                # The start month is fixed when the budget is created.
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["time_period"]),
            )
        self.register_outputs({})


# --- event capture ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventCaptureArgs:
    settings: Settings
    resource_group: pulumi.Input[str]
    scope: pulumi.Input[str]  # the VM, or the resource group for a scale set


class EventCapture(pulumi.ComponentResource):
    """An activity log alert on Resource Health events of the node (evictions make it unavailable),
    e-mailing the stop rules' recipients. The activity log itself keeps the events for 90 days."""

    def __init__(self, name: str, args: EventCaptureArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:EventCapture", name, None, opts)
        s = args.settings
        groups: list[monitor.ActionGroupArgs] = []
        if s.stop.notify_emails:
            group = monitor.ActionGroup(
                f"{name}-notify",
                resource_group_name=args.resource_group,
                location="Global",
                group_short_name="spoteval",
                enabled=True,
                email_receivers=[
                    monitor.MicrosoftCommonEmailReceiverArgs(name=f"to{i}", email_address=email)
                    for i, email in enumerate(s.stop.notify_emails)
                ],
                opts=child(self),
            )
            groups.append(monitor.ActionGroupArgs(action_group_id=group.id))
        monitor.ActivityLogAlert(
            f"{name}-health",
            resource_group_name=args.resource_group,
            location="Global",
            enabled=True,
            description=f"spot-eval {s.run_id}: resource health of the GPU node (evictions)",
            scopes=[args.scope],
            condition=monitor.AlertRuleAllOfConditionArgs(
                all_of=[monitor.AlertRuleAnyOfOrLeafConditionArgs(field="category", equals="ResourceHealth")]
            ),
            actions=monitor.ActionListArgs(action_groups=groups),
            opts=child(self),
        )
        self.register_outputs({})
