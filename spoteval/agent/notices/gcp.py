"""GCP: the metadata server's `instance/preempted` flag, read once and then long-polled with
`wait_for_change=true&last_etag=...`; `TRUE` means preempted (hard off 30 s later). A second watcher
long-polls `instance/maintenance-event`: `TERMINATE_ON_HOST_MAINTENANCE` (host maintenance of a GPU
VM, which cannot live-migrate) is a `scheduled_event` notice (`details.maintenance_event`), the
maintenance following `maintenance_notice_s` later. A reply without an ETag cannot be long-polled:
the next read waits `poll_s` instead of following at once."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Final

from spoteval.agent.notices.base import Deliver, Notice, Throttled, WatchContext, what
from spoteval.agent.notices.http import http
from spoteval.providers import GCP
from spoteval.record import utc_now

_METADATA = GCP.metadata
assert _METADATA is not None and GCP.notice_s is not None and _METADATA.maintenance_notice_s is not None
#: seconds from the preempted flag to the reclaim
NOTICE_S: Final = float(GCP.notice_s)
#: seconds from the maintenance notice to the maintenance
MAINTENANCE_NOTICE_S: Final = float(_METADATA.maintenance_notice_s)
HEADERS: Final = _METADATA.headers
PREEMPTED_PATH: Final = _METADATA.paths["preempted"]
MAINTENANCE_PATH: Final = _METADATA.paths["maintenance_event"]
TERMINATE: Final = b"TERMINATE_ON_HOST_MAINTENANCE"


class GcpWatcher:
    """Metadata server long poll on one key: `instance/preempted`, or with `maintenance=True`
    `instance/maintenance-event` (a long poll, not the polling base's loop)."""

    LABEL: Final = "GCP metadata"
    PATH: Final = PREEMPTED_PATH

    def __init__(self, ctx: WatchContext, *, maintenance: bool = False) -> None:
        self.ctx = ctx
        self.maintenance = maintenance
        self.name = "gcp-maintenance" if maintenance else "gcp"
        self.etag: str | None = None

    def _notice(self, body: bytes) -> Notice | None:
        value = body.strip().upper()
        now = utc_now()
        if not self.maintenance and value == b"TRUE":
            return Notice("preempted", now, now + timedelta(seconds=NOTICE_S), True, self.name, {})
        if self.maintenance and value == TERMINATE:
            deadline = now + timedelta(seconds=MAINTENANCE_NOTICE_S)
            details = {"maintenance_event": value.decode()}
            return Notice("scheduled_event", now, deadline, True, self.name, details)
        return None

    def check(self, wait: bool) -> Notice | None:
        """Read the key; with `wait` and an ETag from the last read, block until it changes (or the
        poll times out). A reply without an ETag clears it, so the next read is a plain one."""
        path = MAINTENANCE_PATH if self.maintenance else self.PATH
        url = self.ctx.base_url + path
        timeout = 5.0
        if wait and self.etag is not None:
            url += f"?wait_for_change=true&last_etag={self.etag}&timeout_sec={int(self.ctx.poll_s)}"
            timeout = self.ctx.poll_s + 10
        reply = http(url, headers=dict(HEADERS), timeout=timeout)
        if reply.status != 200:
            raise OSError(f"{path.rsplit('/', 1)[-1]} answered {reply.status}")
        self.etag = reply.headers.get("etag")
        return self._notice(reply.body)

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        """Long polls until the one notice, which ends the watch."""
        complain = Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                notice = self.check(wait=True)
            except Exception as exc:  # whatever the service answered: log it, poll on
                complain(
                    f"notice watcher {self.name} failed: {self.LABEL} at {self.ctx.base_url}: {what(exc)}"
                )
                stopping.wait(min(self.ctx.poll_s, 5.0))
                continue
            if notice is not None:
                deliver(notice)
                return
            if self.etag is None:  # nothing to long-poll on: poll at the interval instead of spinning
                stopping.wait(self.ctx.poll_s)

    def acknowledge(self, notice: Notice) -> None:
        """GCP takes no acknowledgement."""
