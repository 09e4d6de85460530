"""What every notice source shares: the `Notice`, the `Watcher` interface, the context a watcher runs
in, and `PollingWatcher`, the loop of the sources that poll (AWS, Azure)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

from spoteval.record import utc_now


@dataclass(frozen=True)
class Notice:
    """The capacity is going away (or, for a rebalance recommendation, might)."""

    reason: str  # a notice reason of the record's closed list
    received: datetime
    deadline: datetime
    stops_work: bool = True
    source: str = "signal"
    details: Mapping[str, Any] = field(default_factory=dict)

    def seconds_left(self, now: datetime | None = None) -> float:
        return (self.deadline - (now or utc_now())).total_seconds()


Deliver = Callable[[Notice], None]
Log = Callable[[str], None]


class Watcher(Protocol):
    """Watches one source of notices; `watch` blocks (run it in a daemon thread)."""

    name: str

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None: ...

    def acknowledge(self, notice: Notice) -> None: ...


@dataclass(frozen=True)
class WatchContext:
    provider: str
    base_url: str
    poll_s: float
    log: Log


class Throttled:
    """Logs a repeated failure once, then at most every `every_s` seconds."""

    def __init__(self, log: Log, every_s: float = 60.0) -> None:
        self.log, self.every_s, self.last = log, every_s, -1e18

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.log(message)


class PollingWatcher:
    """A metadata source read every `poll_s`: `check()` returns the new notices of one poll.

    Failures (any exception: whatever the service answered) are logged, throttled, and never end
    the watch. Subclasses set `name` and `LABEL` (what the log calls the source) and implement
    `check`.
    """

    name: str = ""
    LABEL: ClassVar[str] = ""

    def __init__(self, ctx: WatchContext) -> None:
        self.ctx = ctx

    def check(self) -> list[Notice]:
        raise NotImplementedError

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        complain = Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                for notice in self.check():
                    deliver(notice)
            except Exception as exc:  # whatever the service answered: log it, poll on
                complain(
                    f"notice watcher {self.name} failed: {self.LABEL} at {self.ctx.base_url}: {what(exc)}"
                )
            stopping.wait(self.ctx.poll_s)

    def acknowledge(self, notice: Notice) -> None:
        """Most sources take no acknowledgement."""


def what(exc: BaseException) -> str:
    """An exception as one log line, whatever the service sent."""
    text = str(exc) if isinstance(exc, OSError) else repr(exc)
    return " ".join(text.split())


def json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError:
        return {"raw": body.decode(errors="replace")[:500]}
    return obj if isinstance(obj, dict) else {"value": obj}


def stderr_log(message: str) -> None:
    print(f"spot-eval-agent: {message}", file=sys.stderr, flush=True)
