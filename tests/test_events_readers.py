"""The readers of the providers' event histories against loopback fakes of their APIs (GCP Logging,
Azure Activity Log, the Kubernetes API server), the stacks' `event_capture` output, and writing each
provider event into the record once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from components.capture import EVENT_CAPTURE
from components.mocks import read_stack_config, render_stack, stack_files, stack_name
from spoteval.clouds import StackOutputs
from spoteval.events.azure import ActivityLogReader
from spoteval.events.base import Capture, EventsError, ProviderEvent, record
from spoteval.events.gcp import LoggingReader
from spoteval.events.kubernetes import PodConditionReader
from spoteval.record import Event, RunLayout
from spoteval.store import Store
from tests.fake_api import FakeApi, Reply, Request

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
T = datetime(2026, 11, 30, 4, 0, tzinfo=timezone.utc)


def outputs(provider: str, capture: dict[str, str] | None, node_ids: list[str]) -> StackOutputs:
    raw: dict[str, Any] = {
        "provider": provider,
        "region": "r1",
        "zone": "z1",
        "node_ids": node_ids,
        "instance_type": "gpu",
        "market": "spot",
        "bucket_url": "file:///unused",
        "run_id": "run-1",
        "server_port": 8000,
        "address_kind": "public",
    }
    if capture is not None:
        raw[EVENT_CAPTURE] = capture
    return StackOutputs.parse(raw)


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi(lambda r: (404, {"error": "no handler"}, {}))
    yield fake
    fake.close()


# --- GCP: Cloud Logging entries.list on the sink's bucket -----------------------------------------


def _entry(insert: str, when: str, method: str, name: str) -> dict[str, Any]:
    return {
        "insertId": insert,
        "timestamp": when,
        "logName": "projects/p1/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "protoPayload": {
            "methodName": method,
            "resourceName": f"projects/p1/zones/us-central1-a/instances/{name}",
        },
    }


def test_gcp_reader_pages_through_the_bucket_and_keeps_only_preemptions(api: FakeApi) -> None:
    pages = {
        None: {
            "entries": [
                _entry("e1", "2026-11-30T04:00:00.123Z", "compute.instances.preempted", "r-gpu-1"),
                _entry("e2", "2026-11-30T04:05:00Z", "v1.compute.instances.stop", "r-gpu-1"),
            ],
            "nextPageToken": "p2",
        },
        "p2": {"entries": [_entry("e3", "2026-11-30T05:00:00Z", "compute.instances.preempted", "r-gpu-2")]},
    }

    def handle(r: Request) -> Reply:
        assert r.method == "POST" and r.path == "/v2/entries:list"
        return 200, pages[r.body.get("pageToken")], {}

    api.handler = handle
    capture = Capture(
        "cloud_logging", {"project": "p1", "log_bucket": "spot-eval-run-1", "location": "global"}
    )
    reader = LoggingReader(capture, lambda: "tok", endpoint=f"{api.url}/v2/entries:list")
    events = reader.read()
    assert events == [
        ProviderEvent(
            "e1",
            "r-gpu-1",
            datetime(2026, 11, 30, 4, 0, 0, 123000, tzinfo=timezone.utc),
            "preempted",
            "compute.instances.preempted",
            {"zone": "us-central1-a"},
        ),
        ProviderEvent(
            "e3",
            "r-gpu-2",
            datetime(2026, 11, 30, 5, tzinfo=timezone.utc),
            "preempted",
            "compute.instances.preempted",
            {"zone": "us-central1-a"},
        ),
    ]
    bodies = [r.body for r in api.requests]
    assert [b.get("pageToken") for b in bodies] == [None, "p2"]
    assert bodies[0]["resourceNames"] == [
        "projects/p1/locations/global/buckets/spot-eval-run-1/views/_AllLogs"
    ]
    assert bodies[0]["filter"] == 'protoPayload.methodName="compute.instances.preempted"'


def test_gcp_reader_error_names_the_endpoint(api: FakeApi) -> None:
    api.handler = lambda r: (403, {"error": {"message": "denied"}}, {})
    capture = Capture("cloud_logging", {"project": "p1", "log_bucket": "b", "location": "global"})
    with pytest.raises(EventsError, match=r"/v2/entries:list: HTTP 403"):
        LoggingReader(capture, lambda: "tok", endpoint=f"{api.url}/v2/entries:list").read()


# --- Azure: the Activity Log of the resource group -------------------------------------------------

VM = "/subscriptions/s1/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm-gpu"


def _activity(data_id: str, op: str, name: str, when: str, status: str) -> dict[str, Any]:
    return {
        "eventDataId": data_id,
        "operationId": op,
        "operationName": {"value": name, "localizedValue": name},
        "eventTimestamp": when,
        "resourceId": VM,
        "status": {"value": status},
    }


def test_azure_reader_records_one_eviction_per_operation_across_pages(api: FakeApi) -> None:
    evict = "Microsoft.Compute/virtualMachines/evictSpotVM/action"
    path = "/subscriptions/s1/providers/Microsoft.Insights/eventtypes/management/values"

    def handle(r: Request) -> Reply:
        assert r.path == path
        if r.query.get("page") == "2":
            return 200, {"value": [_activity("d3", "op-1", evict, "2026-11-30T04:00:01Z", "Succeeded")]}, {}
        return (
            200,
            {
                "value": [
                    _activity("d1", "op-1", evict, "2026-11-30T04:00:00Z", "Started"),
                    _activity(
                        "d2",
                        "op-2",
                        "Microsoft.Compute/virtualMachines/start/action",
                        "2026-11-30T05:00:00Z",
                        "Succeeded",
                    ),
                ],
                "nextLink": f"{api.url}{path}?page=2",
            },
            {},
        )

    api.handler = handle
    reader = ActivityLogReader(
        Capture("activity_log", {"resource_group": "rg1"}),
        "s1",
        lambda: "tok",
        endpoint=api.url
        + "/subscriptions/{subscription}/providers/Microsoft.Insights/eventtypes/management/values",
        now=lambda: NOW,
    )
    assert reader.read() == [
        ProviderEvent("op-1", "vm-gpu", T, "preempted", evict, {"status": "Started"}),
    ]
    first = api.requests[0].query
    assert first["api-version"] == "2015-04-01"
    assert first["$filter"] == (
        "eventTimestamp ge '2026-09-02T09:00:00Z' and eventTimestamp le '2026-12-01T09:00:00Z' "
        "and resourceGroupName eq 'rg1'"
    )
    assert len(api.requests) == 2


# --- Kubernetes: the DisruptionTarget condition of the Job's pods ----------------------------------


def _pod(name: str, uid: str, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "evals",
            "uid": uid,
            "labels": {"job-name": "run-1-episodes"},
        },
        "status": {"phase": "Failed", "conditions": conditions},
    }


def test_kubernetes_reader_takes_each_disrupted_pod_of_the_job(api: FakeApi) -> None:
    disrupted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.",
        "lastTransitionTime": "2026-11-30T04:00:00Z",
    }
    pods = [
        _pod("run-1-episodes-0-abc", "u0", [disrupted]),
        _pod("run-1-episodes-1-def", "u1", [{**disrupted, "status": "False"}]),
        _pod(
            "run-1-episodes-2-ghi",
            "u2",
            [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T04:00:00Z"}],
        ),
    ]

    def handle(r: Request) -> Reply:
        assert r.method == "GET" and r.path == "/api/v1/namespaces/evals/pods"
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}, {}

    api.handler = handle
    config = k8s.Configuration()
    config.host = api.url
    reader = PodConditionReader(
        Capture("pod_conditions", {"namespace": "evals"}),
        "run-1-episodes",
        k8s.CoreV1Api(k8s.ApiClient(config)),
    )
    assert reader.read() == [
        ProviderEvent(
            "u0/TerminationByKubelet",
            "run-1-episodes-0-abc",
            T,
            "preempted",
            "TerminationByKubelet",
            {"message": "Pod was terminated in response to imminent node shutdown."},
        )
    ]
    assert api.requests[0].query["labelSelector"] == "job-name=run-1-episodes"


# --- writing into the record ---------------------------------------------------------------------


def test_record_writes_each_event_once_with_the_providers_time_and_reason(tmp_path: Path) -> None:
    store = Store(f"file://{tmp_path}")
    out = outputs("gcp", None, ["r-gpu-1"])
    found = [
        ProviderEvent("e1", "r-gpu-1", T, "preempted", "compute.instances.preempted", {"zone": "z9"}),
        ProviderEvent("e1", "r-gpu-1", T, "preempted", "compute.instances.preempted", {"zone": "z9"}),
    ]
    first = record(store, out, found, "cloud_logging")
    second = record(store, out, found, "cloud_logging")
    assert (len(first.written), len(first.existing)) == (1, 0)
    assert (second.written, second.existing) == ((), first.written)
    keys = store.list(RunLayout("run-1").events_prefix)
    assert keys == list(first.written)
    assert keys[0].startswith("runs/run-1/events/20261130T040000.000000Z-r-gpu-1-provider-")
    event, problems = Event.loads(store.get(keys[0]) or b"")
    assert problems == []
    assert (event.time, event.node, event.kind, event.reason, event.provider) == (
        T,
        "r-gpu-1",
        "preempted",
        "provider",
        "gcp",
    )
    assert dict(event.details) == {
        "observer": "provider_events",
        "source": "cloud_logging",
        "event_id": "e1",
        "provider_event": "compute.instances.preempted",
        "zone": "z9",
    }


@pytest.mark.parametrize(
    ("capture", "message"),
    [
        (None, r"the outputs have no 'event_capture'"),
        ({"kind": "syslog"}, r"event_capture\.kind must be one of"),
        ({"kind": "cloud_logging", "project": "p1"}, r"event_capture\.log_bucket is missing"),
    ],
)
def test_a_capture_output_that_is_missing_or_bad_is_named(
    capture: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(EventsError, match=message):
        Capture.from_outputs(outputs("aws", capture, ["i-1"]))


# --- the stacks' event_capture output names what they declare --------------------------------------

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
STACKS = {read_stack_config(p)["spot-eval:provider"]: p for p in stack_files()}


def test_each_stack_exports_where_its_capture_is_declared() -> None:
    aws = render_stack(STACKS["aws"], now=NOW)
    group = aws.one("aws:cloudwatch/logGroup:LogGroup").inputs["name"]
    assert aws.outputs[EVENT_CAPTURE] == {"kind": "cloudwatch_logs", "log_group": group}
    gcp = render_stack(STACKS["gcp"], now=NOW)
    bucket = gcp.one("gcp:logging/projectBucketConfig:ProjectBucketConfig").inputs
    assert gcp.outputs[EVENT_CAPTURE] == {
        "kind": "cloud_logging",
        "project": bucket["project"],
        "log_bucket": bucket["bucketId"],
        "location": bucket["location"],
    }
    azure = render_stack(STACKS["azure"], now=NOW)
    group_name = azure.one("azure-native:resources:ResourceGroup").inputs["resourceGroupName"]
    assert azure.outputs[EVENT_CAPTURE] == {"kind": "activity_log", "resource_group": group_name}
    kube = render_stack(STACKS["k8s"], now=NOW)
    namespace = kube.one("kubernetes:batch/v1:Job").inputs["metadata"]["namespace"]
    assert kube.outputs[EVENT_CAPTURE] == {"kind": "pod_conditions", "namespace": namespace}
    for provider in ("nebius", "runpod"):
        assert EVENT_CAPTURE not in render_stack(STACKS[provider], now=NOW).outputs, stack_name(
            STACKS[provider]
        )


def test_every_event_fact_has_its_source_and_a_reader_exactly_where_a_capture_exists() -> None:
    from spoteval.events.facts import EVENT_HISTORY
    from spoteval.events.readers import EVENT_READERS

    assert {h.source.checked for h in EVENT_HISTORY.values()} == {"2026-12-01"}
    assert all(h.source.url.startswith("https://") for h in EVENT_HISTORY.values())
    with_capture = {key for key, h in EVENT_HISTORY.items() if h.capture}
    assert with_capture == {"aws", "gcp", "azure", "k8s"}
    assert set(EVENT_READERS) - {"kubernetes"} == with_capture
