"""Azure: Spot evictions in the Activity Log of the stack's resource group (REST, api-version 2015-04-01).

`Activity Logs - List` for the resource group over the 90 days Azure keeps, following `nextLink`.
An entry whose `operationName.value` is an eviction (facts.py: `.../evictSpotVM/action`, the name
users report; Microsoft does not document it) becomes a `preempted` event for the VM its
`resourceId` names, at the operation's first entry's `eventTimestamp`; the operation's entries
(Started, Succeeded) share an `operationId`, which is the event id, so an eviction is recorded once.

Credentials: `DefaultAzureCredential`; the subscription from `AZURE_SUBSCRIPTION_ID` (or the
`azure.subscription` option of the control plane).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from spoteval.events.base import Capture, EventsError, ProviderEvent, time_of
from spoteval.events.facts import EVENT_HISTORY
from spoteval.events.http import call_json
from spoteval.record import utc_now

_FACTS: Final = EVENT_HISTORY["azure"]
API_VERSION: Final = "2015-04-01"
SCOPE: Final = "https://management.azure.com/.default"
EVICTIONS: Final = frozenset(name.lower() for name in _FACTS.interruptions)


def provider_events(entries: Iterable[Mapping[str, Any]]) -> list[ProviderEvent]:
    """One `preempted` event per eviction operation, at its earliest entry."""
    first: dict[str, tuple[datetime, Mapping[str, Any]]] = {}
    for entry in entries:
        name = entry.get("operationName")
        value = name.get("value") if isinstance(name, Mapping) else None
        if not isinstance(value, str) or value.lower() not in EVICTIONS:
            continue
        op = entry.get("operationId") or entry.get("eventDataId")
        if not isinstance(op, str) or not op:
            continue
        when = time_of(entry.get("eventTimestamp"), f"activity log entry {op} eventTimestamp")
        if op not in first or when < first[op][0]:
            first[op] = (when, entry)
    out: list[ProviderEvent] = []
    for op, (when, entry) in first.items():
        resource = str(entry.get("resourceId") or "")
        node = resource.rstrip("/").rsplit("/", 1)[-1]
        if not node:
            continue
        name = entry["operationName"]["value"]
        status = entry.get("status")
        details = {"status": status.get("value")} if isinstance(status, Mapping) else {}
        out.append(ProviderEvent(op, node, when, "preempted", name, details))
    return sorted(out, key=lambda e: (e.time, e.event_id))


class ActivityLogReader:
    def __init__(
        self,
        capture: Capture,
        subscription: str,
        token: Callable[[], str],
        *,
        endpoint: str = _FACTS.endpoint,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.group = capture.fields["resource_group"]
        self.url = endpoint.format(subscription=urllib.parse.quote(subscription, safe=""))
        self.token = token
        self.now = now

    def read(self) -> list[ProviderEvent]:
        end = self.now()
        start = end - timedelta(days=_FACTS.retention_days or 90)
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        filt = (
            f"eventTimestamp ge '{start.strftime(stamp)}' and eventTimestamp le '{end.strftime(stamp)}' "
            f"and resourceGroupName eq '{self.group}'"
        )
        query = urllib.parse.urlencode({"api-version": API_VERSION, "$filter": filt})
        url: str | None = f"{self.url}?{query}"
        token, entries = self.token(), list[Mapping[str, Any]]()
        while url:
            page = call_json(url, token)
            values = page.get("value", [])
            entries.extend(v for v in (values if isinstance(values, list) else []) if isinstance(v, Mapping))
            link = page.get("nextLink")
            url = link if isinstance(link, str) and link else None
        return provider_events(entries)


def credential_token() -> str:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import DefaultAzureCredential

    try:
        return DefaultAzureCredential().get_token(SCOPE).token
    except ClientAuthenticationError as exc:
        raise EventsError(f"azure: no usable credentials for the Activity Log: {exc}") from None


def connect(capture: Capture, subscription: str | None) -> ActivityLogReader:
    if not subscription:
        raise EventsError("azure: the Activity Log needs the subscription: set AZURE_SUBSCRIPTION_ID")
    return ActivityLogReader(capture, subscription, credential_token)
