"""Azure stop rules and server-side capture of evictions (the rest of the stack: components/azure.py).

Stop rules: a consumption budget with e-mail alerts (max runtime, idle and done are the agent's).
Event capture: an activity log alert on the node's Resource Health events.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import consumption, monitor

from components.base import BuildContext, child
from components.settings import Settings

# --- stop rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopRulesArgs:
    settings: Settings
    context: BuildContext
    resource_group: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]


class StopRules(pulumi.ComponentResource):
    """Budget: a consumption budget on the resource group with e-mail alerts at 80 % and 100 %.
    Max runtime, idle and done are the agent's (Azure has no built-in max run time); the price cap
    is the Spot max price. An OS shutdown does not deallocate an Azure VM, so the agent exits
    instead of powering off, and the VM is deallocated from outside."""

    def __init__(self, name: str, args: StopRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:StopRules", name, None, opts)
        s = args.settings
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
