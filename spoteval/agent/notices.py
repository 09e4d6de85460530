"""Interruption notices: one watcher per provider behind a Protocol, plus SIGTERM for every provider.

Each watcher runs in a daemon thread and calls `deliver(notice)` when the capacity is about to go.
Protocols (see PROVIDERS.md; the base URL comes from the config's `metadata_url` so tests can
point it at a fake):

- aws: IMDSv2. `PUT /latest/api/token` (TTL header) then, every `poll_s` (default 5 s), with the
  token: `GET /latest/meta-data/spot/instance-action` (404 = nothing; `{"action", "time"}` = stop
  by `time`) and `GET /latest/meta-data/events/recommendations/rebalance` (`{"noticeTime"}`: a
  rebalance recommendation, recorded but work continues).
- gcp: `GET /computeMetadata/v1/instance/preempted` with `Metadata-Flavor: Google`, then long polls
  with `wait_for_change=true&last_etag=...`; `TRUE` = preempted, hard off 30 s later.
- azure: `GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true` every `poll_s`
  (default 1 s); a `Preempt` (or `Terminate`, `Reboot`, `Redeploy`) event for this VM stops work by
  its `NotBefore`. `acknowledge()` POSTs `{"StartRequests": [{"EventId": ...}]}` once the agent has
  recorded its in-flight work, which lets the eviction proceed.
- k8s, nebius, runpod, local: no metadata endpoint; SIGTERM only.

SIGTERM (and SIGINT, for a user's Ctrl-C) is a `sigterm` notice for every provider; its deadline is
the provider's usual grace before SIGKILL (`SIGTERM_GRACE_S`, or the config's `sigterm_grace_s`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Final, Protocol

from spoteval.record import RecordError, parse_time, utc_now

DEFAULT_METADATA_URL: Final[Mapping[str, str]] = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
DEFAULT_POLL_S: Final[Mapping[str, float]] = {"aws": 5.0, "gcp": 60.0, "azure": 1.0}
#: Seconds from a provider notice to reclaim when the notice itself carries no time.
NOTICE_S: Final[Mapping[str, float]] = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
#: Seconds from SIGTERM to SIGKILL the agent assumes per provider (conservative; see PROVIDERS.md):
#: GCP hard off 30 s after ACPI off; GKE spot pods 15 s by default; Nebius 60 s; Runpod 5 s.
SIGTERM_GRACE_S: Final[Mapping[str, float]] = {
    "aws": 30.0,
    "gcp": 30.0,
    "azure": 30.0,
    "k8s": 15.0,
    "nebius": 60.0,
    "runpod": 5.0,
    "local": 10.0,
}
AZURE_STOPPING_EVENTS: Final = frozenset({"Preempt", "Terminate", "Reboot", "Redeploy"})
AZURE_EVENTS_PATH: Final = "/metadata/scheduledevents?api-version=2020-07-01"


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


# --- HTTP to the metadata service (never through a proxy) ---------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]


def http(
    url: str,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 2.0,
) -> Reply:
    """One request; HTTP error statuses are replies, connection failures raise OSError."""
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()})
    except urllib.error.HTTPError as exc:
        body = exc.read() if exc.fp is not None else b""
        return Reply(exc.code, body, {k.lower(): v for k, v in (exc.headers or {}).items()})


class _Throttled:
    """Logs a repeated failure once, then at most every `every_s` seconds."""

    def __init__(self, log: Log, every_s: float = 60.0) -> None:
        self.log, self.every_s, self.last = log, every_s, -1e18

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.log(message)


# --- AWS ----------------------------------------------------------------------------------------


class AwsWatcher:
    """IMDSv2: spot instance-action (stop work) and rebalance recommendation (record only)."""

    name = "aws"

    def __init__(self, ctx: WatchContext) -> None:
        self.ctx = ctx
        self._token: str | None = None
        self._token_expires = 0.0
        self._seen: set[bytes] = set()

    def _get_token(self) -> str:
        if self._token is None or time.monotonic() > self._token_expires:
            reply = http(
                self.ctx.base_url + "/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
            )
            if reply.status != 200 or not reply.body:
                raise OSError(f"IMDSv2 token request answered {reply.status}")
            self._token = reply.body.decode().strip()
            self._token_expires = time.monotonic() + 21600 - 60
        return self._token

    def _get(self, path: str) -> Reply:
        reply = http(self.ctx.base_url + path, headers={"X-aws-ec2-metadata-token": self._get_token()})
        if reply.status == 401:  # token expired or revoked: fetch a new one once
            self._token = None
            reply = http(self.ctx.base_url + path, headers={"X-aws-ec2-metadata-token": self._get_token()})
        return reply

    def check(self) -> list[Notice]:
        """One poll of both endpoints; each distinct notice is returned once."""
        found: list[Notice] = []
        now = utc_now()
        action = self._get("/latest/meta-data/spot/instance-action")
        if action.status == 200 and action.body and action.body not in self._seen:
            self._seen.add(action.body)
            payload = _json_object(action.body)
            deadline = now + timedelta(seconds=NOTICE_S["aws"])
            if isinstance(payload.get("time"), str):
                with contextlib.suppress(RecordError):
                    deadline = parse_time(payload["time"])
            found.append(
                Notice("spot_interruption", now, deadline, True, self.name, {"instance_action": payload})
            )
        elif action.status not in (200, 404):
            raise OSError(f"spot/instance-action answered {action.status}")
        rebalance = self._get("/latest/meta-data/events/recommendations/rebalance")
        if rebalance.status == 200 and rebalance.body and rebalance.body not in self._seen:
            self._seen.add(rebalance.body)
            payload = _json_object(rebalance.body)
            found.append(
                Notice(
                    "rebalance_recommendation",
                    now,
                    now + timedelta(seconds=NOTICE_S["aws"]),
                    False,
                    self.name,
                    {"rebalance": payload},
                )
            )
        elif rebalance.status not in (200, 404):
            raise OSError(f"events/recommendations/rebalance answered {rebalance.status}")
        return found

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        complain = _Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                for notice in self.check():
                    deliver(notice)
            except OSError as exc:
                complain(f"AWS metadata at {self.ctx.base_url}: {exc}")
            stopping.wait(self.ctx.poll_s)

    def acknowledge(self, notice: Notice) -> None:
        """AWS takes no acknowledgement."""


# --- GCP ----------------------------------------------------------------------------------------


class GcpWatcher:
    """Metadata server long poll on instance/preempted."""

    name = "gcp"
    PATH: Final = "/computeMetadata/v1/instance/preempted"

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
        reply = http(url, headers={"Metadata-Flavor": "Google"}, timeout=timeout)
        if reply.status != 200:
            raise OSError(f"instance/preempted answered {reply.status}")
        self.etag = reply.headers.get("etag", self.etag)
        if reply.body.strip().upper() == b"TRUE":
            now = utc_now()
            return Notice("preempted", now, now + timedelta(seconds=NOTICE_S["gcp"]), True, self.name, {})
        return None

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        complain = _Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                notice = self.check(wait=True)
            except OSError as exc:
                complain(f"GCP metadata at {self.ctx.base_url}: {exc}")
                stopping.wait(min(self.ctx.poll_s, 5.0))
                continue
            if notice is not None:
                deliver(notice)
                return

    def acknowledge(self, notice: Notice) -> None:
        """GCP takes no acknowledgement."""


# --- Azure --------------------------------------------------------------------------------------


class AzureWatcher:
    """Scheduled Events: Preempt (and other events that take the VM) for this VM; acknowledged."""

    name = "azure"

    def __init__(self, ctx: WatchContext) -> None:
        self.ctx = ctx
        self.vm_name: str | None = None
        self._asked_name = False
        self._seen: set[str] = set()

    def _vm_name(self) -> str | None:
        if not self._asked_name:
            self._asked_name = True
            try:
                reply = http(
                    self.ctx.base_url + "/metadata/instance/compute/name?api-version=2021-02-01&format=text",
                    headers={"Metadata": "true"},
                )
                if reply.status == 200 and reply.body.strip():
                    self.vm_name = reply.body.decode().strip()
            except OSError:
                self.vm_name = None
        return self.vm_name

    def check(self) -> list[Notice]:
        reply = http(self.ctx.base_url + AZURE_EVENTS_PATH, headers={"Metadata": "true"}, timeout=5.0)
        if reply.status != 200:
            raise OSError(f"scheduledevents answered {reply.status}")
        doc = _json_object(reply.body)
        events = doc.get("Events")
        found: list[Notice] = []
        name = self._vm_name()
        for ev in events if isinstance(events, list) else []:
            if not isinstance(ev, dict):
                continue
            event_id, event_type = str(ev.get("EventId", "")), str(ev.get("EventType", ""))
            if event_type not in AZURE_STOPPING_EVENTS or not event_id or event_id in self._seen:
                continue
            resources = ev.get("Resources")
            if name and isinstance(resources, list) and resources and name not in resources:
                continue  # an event for another VM of the same set
            self._seen.add(event_id)
            now = utc_now()
            deadline = now + timedelta(seconds=NOTICE_S["azure"])
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

    def watch(self, deliver: Deliver, stopping: threading.Event) -> None:
        complain = _Throttled(self.ctx.log)
        while not stopping.is_set():
            try:
                for notice in self.check():
                    deliver(notice)
            except OSError as exc:
                complain(f"Azure scheduled events at {self.ctx.base_url}: {exc}")
            stopping.wait(self.ctx.poll_s)

    def acknowledge(self, notice: Notice) -> None:
        """Approve the event so the eviction proceeds now (call once in-flight work is recorded)."""
        event_id = notice.details.get("event_id")
        if not event_id:
            return
        body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
        reply = http(
            self.ctx.base_url + AZURE_EVENTS_PATH,
            method="POST",
            headers={"Metadata": "true", "Content-Type": "application/json"},
            data=body,
            timeout=5.0,
        )
        if reply.status not in (200, 201, 202, 204):
            raise OSError(f"acknowledging scheduled event {event_id} answered {reply.status}")


# --- SIGTERM ------------------------------------------------------------------------------------


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


# --- registry -----------------------------------------------------------------------------------


def _no_metadata(ctx: WatchContext) -> Watcher | None:
    return None


WATCHERS: Final[Mapping[str, Callable[[WatchContext], Watcher | None]]] = {
    "aws": AwsWatcher,
    "gcp": GcpWatcher,
    "azure": AzureWatcher,
    "k8s": _no_metadata,
    "nebius": _no_metadata,
    "runpod": _no_metadata,
    "local": _no_metadata,
}


def provider_watcher(
    provider: str, metadata_url: str | None, poll_s: float | None, log: Log
) -> Watcher | None:
    """The provider's metadata watcher (None for providers that only send SIGTERM)."""
    base = metadata_url or DEFAULT_METADATA_URL.get(provider, "")
    ctx = WatchContext(provider, base.rstrip("/"), poll_s or DEFAULT_POLL_S.get(provider, 5.0), log)
    return WATCHERS[provider](ctx)


def start_watcher(watcher: Watcher, deliver: Deliver, stopping: threading.Event) -> threading.Thread:
    thread = threading.Thread(
        target=watcher.watch, args=(deliver, stopping), name=f"notice-{watcher.name}", daemon=True
    )
    thread.start()
    return thread


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError:
        return {"raw": body.decode(errors="replace")[:500]}
    return obj if isinstance(obj, dict) else {"value": obj}


def stderr_log(message: str) -> None:
    print(f"spot-eval-agent: {message}", file=sys.stderr, flush=True)
