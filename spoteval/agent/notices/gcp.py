"""GCP: the metadata server's `instance/preempted` flag, read once and then long-polled with
`wait_for_change=true&last_etag=...`; `TRUE` means preempted (hard off 30 s later)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Final

from spoteval.agent.notices.base import Deliver, Notice, Throttled, WatchContext
from spoteval.agent.notices.http import http
from spoteval.providers import GCP
from spoteval.record import utc_now

_METADATA = GCP.metadata
assert _METADATA is not None and GCP.notice_s is not None
#: seconds from the preempted flag to the reclaim
NOTICE_S: Final = float(GCP.notice_s)
HEADERS: Final = _METADATA.headers
PREEMPTED_PATH: Final = _METADATA.paths["preempted"]


class GcpWatcher:
    """Metadata server long poll on instance/preempted (a long poll, not the polling base's loop)."""

    name = "gcp"
    LABEL: Final = "GCP metadata"
    PATH: Final = PREEMPTED_PATH

    def __init__(self, ctx: WatchContext) -> None:
        self.ctx = ctx
        self.etag: str | None = None

    def check(self, wait: bool) -> Notice | None:
        """Read the flag; with `wait`, block until it changes (or the poll times out)."""
        url = self.ctx.base_url + self.PATH
        timeout = 5.0
        if wait and self.etag is not None:
            url += f"?wait_for_change=true&last_etag={self.etag}&timeout_sec={int(self.ctx.poll_s)}"
            timeout = self.ctx.poll_s + 10
        reply = http(url, headers=dict(HEADERS), timeout=timeout)
        if reply.status != 200:
            raise OSError(f"instance/preempted answered {reply.status}")
        self.etag = reply.headers.get("etag", self.etag)
        if reply.body.strip().upper() == b"TRUE":
            now = utc_now()
            return Notice("preempted", now, now + timedelta(seconds=NOTICE_S), True, self.name, {})
        return None

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        """Long polls until the one preemption, which ends the watch."""
        complain = Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                notice = self.check(wait=True)
            except OSError as exc:
                complain(f"{self.LABEL} at {self.ctx.base_url}: {exc}")
                stopping.wait(min(self.ctx.poll_s, 5.0))
                continue
            if notice is not None:
                deliver(notice)
                return

    def acknowledge(self, notice: Notice) -> None:
        """GCP takes no acknowledgement."""
