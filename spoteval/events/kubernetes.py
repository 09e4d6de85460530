"""Kubernetes: the `DisruptionTarget` condition of the episode Job's pods (kubernetes client).

The Job keeps its ended pods until the Job is deleted, and a pod the cluster took (its node shut
down or drained, deleted by the taint manager or the pod garbage collector, evicted, or preempted by
the scheduler) carries the condition with its reason and `lastTransitionTime`. Each such condition
becomes a `preempted` event of the pod (the agent's node id on Kubernetes is its pod's name); its
event id is the pod's uid with the reason. Events are not read: the API server keeps them an hour.
"""

from __future__ import annotations

from typing import Any, Final

from spoteval.apis import kubeconfig
from spoteval.events.base import Capture, EventsError, ProviderEvent, time_of
from spoteval.events.facts import EVENT_HISTORY
from spoteval.record import format_time

_FACTS: Final = EVENT_HISTORY["k8s"]
CONDITION: Final = "DisruptionTarget"


def pod_events(pod: Any) -> list[ProviderEvent]:
    """The disruptions of one pod (a `V1Pod`)."""
    meta, status = pod.metadata, pod.status
    out: list[ProviderEvent] = []
    for cond in (status.conditions if status is not None else None) or []:
        if cond.type != CONDITION or cond.status != "True" or cond.reason not in _FACTS.interruptions:
            continue
        when = cond.last_transition_time
        if when is None:
            continue
        time = time_of(format_time(when), f"pod {meta.name} {CONDITION} time")
        details = {"message": cond.message} if cond.message else {}
        out.append(
            ProviderEvent(f"{meta.uid}/{cond.reason}", meta.name, time, "preempted", cond.reason, details)
        )
    return out


class PodConditionReader:
    def __init__(self, capture: Capture, job: str, core: Any) -> None:
        self.namespace = capture.fields["namespace"]
        self.job = job  # the stack's node id on Kubernetes: the episode Job's name
        self.core = core

    def read(self) -> list[ProviderEvent]:
        from kubernetes.client.exceptions import ApiException

        out: list[ProviderEvent] = []
        token: str | None = None
        try:
            while True:
                kwargs: dict[str, Any] = {"label_selector": f"job-name={self.job}", "limit": 500}
                if token:
                    kwargs["_continue"] = token
                pods = self.core.list_namespaced_pod(self.namespace, **kwargs)
                for pod in pods.items:
                    out.extend(pod_events(pod))
                token = pods.metadata._continue if pods.metadata is not None else None
                if not token:
                    break
        except ApiException as exc:
            where = f"{self.namespace}/{self.job}"
            raise EventsError(f"kubernetes list pods of job {where}: {exc.status} {exc.reason}") from None
        return sorted(out, key=lambda e: (e.time, e.event_id))


def connect(capture: Capture, job: str) -> PodConditionReader:
    from kubernetes import client as k8s

    return PodConditionReader(capture, job, k8s.CoreV1Api(kubeconfig.api_client(EventsError)))
