"""Azure: Scheduled Events, polled every `poll_s` with the `Metadata: true` header. An event that takes
the VM (`Preempt`, `Terminate`, `Reboot`, `Redeploy`) for this VM stops work by its `NotBefore`;
`acknowledge()` POSTs `{"StartRequests": [{"EventId": ...}]}` once the agent has recorded its
in-flight work, which lets the eviction proceed."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Final

from spoteval.agent.notices.base import Notice, PollingWatcher, WatchContext, json_object
from spoteval.agent.notices.http import http
from spoteval.providers import AZURE
from spoteval.record import utc_now

_METADATA = AZURE.metadata
assert _METADATA is not None and AZURE.notice_s is not None
#: seconds from an event to the reclaim when the event carries no NotBefore
NOTICE_S: Final = float(AZURE.notice_s)
STOPPING_EVENTS: Final = _METADATA.stopping_events
EVENTS_PATH: Final = _METADATA.paths["scheduled_events"]
NAME_PATH: Final = _METADATA.paths["compute"] + "name" + _METADATA.paths["text_query"]
HEADERS: Final = _METADATA.headers


class AzureWatcher(PollingWatcher):
    """Scheduled Events: Preempt (and other events that take the VM) for this VM; acknowledged."""

    name = "azure"
    LABEL = "Azure scheduled events"

    def __init__(self, ctx: WatchContext) -> None:
        super().__init__(ctx)
        self.vm_name: str | None = None
        self._asked_name = False
        self._seen: set[str] = set()

    def _vm_name(self) -> str | None:
        if not self._asked_name:
            self._asked_name = True
            try:
                reply = http(self.ctx.base_url + NAME_PATH, headers=dict(HEADERS))
                if reply.status == 200 and reply.body.strip():
                    self.vm_name = reply.body.decode().strip()
            except (OSError, UnicodeDecodeError):
                self.vm_name = None
        return self.vm_name

    def check(self) -> list[Notice]:
        reply = http(self.ctx.base_url + EVENTS_PATH, headers=dict(HEADERS), timeout=5.0)
        if reply.status != 200:
            raise OSError(f"scheduledevents answered {reply.status}")
        doc = json_object(reply.body)
        events = doc.get("Events")
        found: list[Notice] = []
        name = self._vm_name()
        for ev in events if isinstance(events, list) else []:
            if not isinstance(ev, dict):
                continue
            event_id, event_type = str(ev.get("EventId", "")), str(ev.get("EventType", ""))
            if event_type not in STOPPING_EVENTS or not event_id or event_id in self._seen:
                continue
            resources = ev.get("Resources")
            if name and isinstance(resources, list) and resources and name not in resources:
                continue  # an event for another VM of the same set
            self._seen.add(event_id)
            now = utc_now()
            deadline = now + timedelta(seconds=NOTICE_S)
            not_before = ev.get("NotBefore")
            if isinstance(not_before, str) and not_before.strip():
                with contextlib.suppress(TypeError, ValueError):
                    deadline = parsedate_to_datetime(not_before).astimezone(timezone.utc)
            found.append(
                Notice(
                    "scheduled_event",
                    now,
                    deadline,
                    True,
                    self.name,
                    {
                        "event_id": event_id,
                        "event_type": event_type,
                        "not_before": not_before,
                        "document_incarnation": doc.get("DocumentIncarnation"),
                    },
                )
            )
        return found

    def acknowledge(self, notice: Notice) -> None:
        """Approve the event so the eviction proceeds now (call once in-flight work is recorded)."""
        event_id = notice.details.get("event_id")
        if not event_id:
            return
        body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
        reply = http(
            self.ctx.base_url + EVENTS_PATH,
            method="POST",
            headers={**HEADERS, "Content-Type": "application/json"},
            data=body,
            timeout=5.0,
        )
        if reply.status not in (200, 201, 202, 204):
            raise OSError(f"acknowledging scheduled event {event_id} answered {reply.status}")
