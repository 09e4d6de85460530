"""SIGTERM (and SIGINT, for a user's Ctrl-C) as a `sigterm` notice, for every provider."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from datetime import timedelta

from spoteval.agent.notices.base import Deliver, Notice
from spoteval.record import utc_now


class SignalWatcher:
    """SIGTERM (and SIGINT) as a `sigterm` notice, through a self-pipe (safe in a signal handler)."""

    name = "signal"

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def install(self) -> None:
        """Install the handlers (call from the main thread)."""
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, bytes([signum]))

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        while True:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                now = utc_now()
                deliver(
                    Notice(
                        "sigterm",
                        now,
                        now + timedelta(seconds=self.grace_s),
                        True,
                        self.name,
                        {"signal": signal.Signals(signum).name},
                    )
                )

    def acknowledge(self, notice: Notice) -> None:
        """A signal takes no acknowledgement."""
