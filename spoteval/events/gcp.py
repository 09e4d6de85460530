"""GCP: the `compute.instances.preempted` audit entries the stack's log sink keeps in its log bucket.

`entries.list` (Cloud Logging API v2) on the bucket's `_AllLogs` view, oldest first, all pages. Each
entry becomes a `preempted` event at its `timestamp` for the instance its
`protoPayload.resourceName` names (`projects/P/zones/Z/instances/NAME`: the node id is NAME, as the
agent reads it from the metadata server); the entry's `insertId` is its event id.

Credentials: Application Default Credentials with the `logging.read` scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from spoteval.events.base import Capture, EventsError, ProviderEvent, time_of
from spoteval.events.facts import EVENT_HISTORY
from spoteval.events.http import call_json

_FACTS: Final = EVENT_HISTORY["gcp"]
METHOD: Final = next(iter(_FACTS.interruptions))
SCOPE: Final = "https://www.googleapis.com/auth/logging.read"


def entry_event(entry: Mapping[str, Any]) -> ProviderEvent | None:
    """The `preempted` event of one log entry, or None for an entry that is not a preemption."""
    payload = entry.get("protoPayload")
    if not isinstance(payload, Mapping) or payload.get("methodName") != METHOD:
        return None
    resource, entry_id = payload.get("resourceName"), entry.get("insertId")
    if not isinstance(resource, str) or "/instances/" not in resource or not isinstance(entry_id, str):
        return None
    parts = resource.split("/")
    zone = parts[parts.index("zones") + 1] if "zones" in parts[:-1] else None
    when = time_of(entry.get("timestamp"), f"log entry {entry_id} timestamp")
    details = {"zone": zone} if zone else {}
    return ProviderEvent(entry_id, parts[-1], when, "preempted", METHOD, details)


class LoggingReader:
    def __init__(self, capture: Capture, token: Callable[[], str], endpoint: str = _FACTS.endpoint) -> None:
        f = capture.fields
        bucket = f"projects/{f['project']}/locations/{f['location']}/buckets/{f['log_bucket']}"
        self.view = f"{bucket}/views/_AllLogs"
        self.token = token
        self.endpoint = endpoint

    def read(self) -> list[ProviderEvent]:
        body: dict[str, Any] = {
            "resourceNames": [self.view],
            "filter": f'protoPayload.methodName="{METHOD}"',
            "orderBy": "timestamp asc",
            "pageSize": 1000,
        }
        token, out = self.token(), []
        while True:
            page = call_json(self.endpoint, token, body)
            entries = page.get("entries", [])
            for entry in entries if isinstance(entries, list) else []:
                event = entry_event(entry) if isinstance(entry, Mapping) else None
                if event is not None:
                    out.append(event)
            next_token = page.get("nextPageToken")
            if not isinstance(next_token, str) or not next_token:
                return out
            body["pageToken"] = next_token


def adc_token() -> str:
    import google.auth
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        credentials.refresh(Request())  # type: ignore[no-untyped-call]
    except exceptions.GoogleAuthError as exc:
        raise EventsError(f"gcp: no usable credentials for the Logging API: {exc}") from None
    return str(credentials.token)


def connect(capture: Capture) -> LoggingReader:
    return LoggingReader(capture, adc_token)
