"""What each provider records of its own interruptions and state changes, and where spot-eval reads it.

The provider facts of spoteval/providers.py for the provider's event history, kept beside the readers
because providers.py is at the project's module-size limit; every fact has its `Source` (the page it
was checked against, the date) in the same form, and nothing else in spoteval/events/ holds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from spoteval.providers import Source

_AWS_WARNING = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
_AWS_STATES = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html"
_AWS_LOGS = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_FilterLogEvents.html"
_GCP_LIST = "https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list"
_GCP_DETECT = "https://cloud.google.com/compute/docs/instances/create-use-spot#detect-preemption"
_AZ_LIST = "https://learn.microsoft.com/rest/api/monitor/activitylogs/list"
_AZ_RETENTION = "https://learn.microsoft.com/azure/azure-monitor/essentials/activity-log"
_K8S_DISRUPTION = "https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions"
_NB_AUDIT = "https://github.com/nebius/api/tree/main/nebius/audit/v2"
_RP_REST = "https://docs.runpod.io/api-reference-v2/pods/get-a-pod"


@dataclass(frozen=True)
class EventHistory:
    """One provider's record of interruptions and state changes, as spot-eval reads it."""

    #: where the stack keeps the events ("" when the provider keeps none spot-eval can read)
    capture: str
    #: the API call the reader makes ("" when there is no reader)
    api: str
    #: the provider's names of an interruption (an EventBridge detail-type, an audit method, ...)
    interruptions: frozenset[str]
    #: the provider's names of a state change and the states that mean the node no longer runs
    state_change: str
    stopped_states: frozenset[str]
    #: how long the provider (or the stack's capture) keeps the events, in days (None: not documented)
    retention_days: float | None
    source: Source
    #: a second page for the event names, when they are documented apart from the API
    names_source: Source | None = None
    #: the API's address, where the reader calls it over HTTP ({...} fields filled by the reader)
    endpoint: str = ""


EVENT_HISTORY: Final = {
    # EventBridge rules of the stack write each matching event, as JSON, to a Logs group kept 400
    # days; the warning comes two minutes before EC2 stops or terminates the instance.
    "aws": EventHistory(
        capture="CloudWatch Logs group /spot-eval/RUN_ID/ec2-events (EventBridge rules)",
        api="logs:FilterLogEvents",
        interruptions=frozenset({"EC2 Spot Instance Interruption Warning"}),
        state_change="EC2 Instance State-change Notification",
        stopped_states=frozenset({"stopped", "terminated"}),
        retention_days=400,
        source=Source(_AWS_LOGS),
        names_source=Source(
            _AWS_WARNING, note=f"state names: {_AWS_STATES}; detail: instance-id, instance-action / state"
        ),
    ),
    # The stack's log sink routes the system-event audit entries of the run's VMs to a log bucket
    # kept 400 days; `protoPayload.resourceName` names the instance, `insertId` is the entry's id.
    "gcp": EventHistory(
        capture="Cloud Logging bucket spot-eval-RUN_ID (a log sink of system-event audit logs)",
        api="logging.entries.list",
        interruptions=frozenset({"compute.instances.preempted"}),
        state_change="",
        stopped_states=frozenset(),
        retention_days=400,
        source=Source(_GCP_LIST),
        names_source=Source(_GCP_DETECT),
        endpoint="https://logging.googleapis.com/v2/entries:list",
    ),
    # The Activity Log of the resource group, 90 days. The operation name of a platform eviction is
    # reported by users (AzureActivity tables, az monitor activity-log) but not documented by Microsoft.
    "azure": EventHistory(
        capture="the Activity Log of the stack's resource group (Azure keeps it 90 days)",
        api="Microsoft.Insights/eventtypes/management/values (api-version 2015-04-01)",
        interruptions=frozenset(
            {
                "Microsoft.Compute/virtualMachines/evictSpotVM/action",
                "Microsoft.Compute/virtualMachineScaleSets/evictSpotVM/action",
            }
        ),
        state_change="",
        stopped_states=frozenset(),
        retention_days=90,
        source=Source(_AZ_LIST, note=f"retention: {_AZ_RETENTION}"),
        names_source=Source(
            _AZ_LIST, note="evictSpotVM operation names: unconfirmed (users' reports, not Microsoft's docs)"
        ),
        endpoint="https://management.azure.com/subscriptions/{subscription}/providers/"
        "Microsoft.Insights/eventtypes/management/values",
    ),
    # The Job keeps its ended pods (until the Job is deleted), and a pod the cluster took carries
    # the `DisruptionTarget` condition with the reason and its time: a durable record, unlike
    # Events, which the API server keeps one hour by default.
    "k8s": EventHistory(
        capture="the DisruptionTarget condition of the Job's pods (kept with the Job)",
        api="core/v1 list namespaced pods (label job-name)",
        interruptions=frozenset(
            {
                "TerminationByKubelet",
                "DeletionByTaintManager",
                "DeletionByPodGC",
                "EvictionByEvictionAPI",
                "PreemptionByScheduler",
            }
        ),
        state_change="",
        stopped_states=frozenset(),
        retention_days=None,
        source=Source(_K8S_DISRUPTION),
    ),
    # Nebius has an audit-event API (nebius.audit.v2 AuditEventService.List); whether the platform's
    # stop of a preempted VM is an audit event is not documented. No reader.
    "nebius": EventHistory(
        capture="",
        api="",
        interruptions=frozenset(),
        state_change="",
        stopped_states=frozenset(),
        retention_days=None,
        source=Source(_NB_AUDIT, note="preemptions as audit events: not documented"),
    ),
    # Runpod's REST API v2 has no event history of a pod (only its current status). No reader.
    "runpod": EventHistory(
        capture="",
        api="",
        interruptions=frozenset(),
        state_change="",
        stopped_states=frozenset(),
        retention_days=None,
        source=Source(_RP_REST, note="REST API v2: a pod's current status only, no event history"),
    ),
}
