"""Fakes on loopback for the agent's tests (metadata services, a price API, a TCP proxy) and a
harness that runs the agent as a process and reads back the run record.

- `FakeAws`: IMDSv2. A token from `PUT /latest/api/token` (TTL header required) must accompany
  every metadata GET (else 401); `spot/instance-action` and `events/recommendations/rebalance`
  answer 404 until the test sets them.
- `FakeGcp`: `instance/preempted` needs `Metadata-Flavor: Google` (else 403); answers `FALSE` or
  `TRUE` with an ETag, and holds `wait_for_change=true&last_etag=...` until the value changes.
- `FakeAzure`: Scheduled Events need `Metadata: true` (else 400); `POST` with `StartRequests`
  acknowledges events (recorded in `acks`, and the event leaves the document, as on Azure);
  `instance/compute/name` gives the VM's name.
- `FakeAzurePrices`: the Retail Prices API, two pages.
- `Proxy`: a TCP proxy in front of a store that the test can cut (connections reset, new ones
  refused) and restore on the same port: a store outage.
- `start_agent` runs `python -m spoteval.agent` in its own session with a tag in its environment;
  every process it starts inherits the tag, so `signal_all` can shut down or "lose" the whole
  node (SIGKILL of the agent, its model server and its episodes) by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from spoteval.record import Attempt, Event, RunLayout
from spoteval.store import Store
from tests.servers import REPO, free_port

Handler = Callable[["_Request"], tuple[int, dict[str, str], bytes]]


class _Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        parsed = urlparse(path)
        self.method, self.path, self.headers, self.body = method, parsed.path, headers, body
        self.query = {k: v[0] for k, v in parse_qs(parsed.query).items()}


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 whose answers come from `handle(request)`."""

    def __init__(self) -> None:
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = _Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with fake.lock:
                    fake.requests.append(req)
                status, headers, data = fake.handle(req)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _any

        self.lock = threading.Lock()
        self.requests: list[_Request] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json(status: int, obj: object) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode()


def _text(status: int, text: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "text/plain", **headers}, text.encode()


class FakeAws(FakeServer):
    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.instance_action: dict[str, str] | None = None
        self.action_time: datetime | None = None
        self.rebalance: dict[str, str] | None = None
        self.unauthorized = 0
        super().__init__()

    def interrupt(self, action: str = "stop", seconds: float = 120.0) -> None:
        when = (datetime.now(timezone.utc) + timedelta(seconds=seconds)).replace(microsecond=0)
        self.action_time = when  # the time the reply carries, to the second
        self.instance_action = {"action": action, "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}

    def recommend_rebalance(self) -> None:
        self.rebalance = {"noticeTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.method == "PUT" and req.path == "/latest/api/token":
            if "x-aws-ec2-metadata-token-ttl-seconds" not in req.headers:
                return _text(400, "missing TTL header")
            token = uuid.uuid4().hex
            self.tokens.add(token)
            return _text(200, token)
        if req.headers.get("x-aws-ec2-metadata-token") not in self.tokens:
            self.unauthorized += 1
            return _text(401, "Unauthorized")
        if req.path == "/latest/meta-data/spot/instance-action":
            return _json(200, self.instance_action) if self.instance_action else _text(404, "Not Found")
        if req.path == "/latest/meta-data/events/recommendations/rebalance":
            return _json(200, self.rebalance) if self.rebalance else _text(404, "Not Found")
        return _text(404, "Not Found")


class FakeGcp(FakeServer):
    def __init__(self) -> None:
        self.preempted = False
        self.etag = "e0"
        self.changed = threading.Condition()
        self.missing_header = 0
        super().__init__()

    def preempt(self) -> None:
        with self.changed:
            self.preempted, self.etag = True, "e1"
            self.changed.notify_all()

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.headers.get("metadata-flavor") != "Google":
            self.missing_header += 1
            return _text(403, "Missing Metadata-Flavor:Google header.")
        if req.path != "/computeMetadata/v1/instance/preempted":
            return _text(404, "Not Found")
        if req.query.get("wait_for_change") == "true":
            timeout = float(req.query.get("timeout_sec", "60"))
            with self.changed:
                self.changed.wait_for(lambda: self.etag != req.query.get("last_etag"), timeout=timeout)
        return _text(200, "TRUE" if self.preempted else "FALSE", ETag=self.etag)


class FakeAzure(FakeServer):
    def __init__(self, vm_name: str = "vm-1") -> None:
        self.vm_name = vm_name
        self.events: list[dict[str, Any]] = []
        self.incarnation = 1
        self.acks: list[tuple[float, list[str]]] = []
        self.not_before: dict[str, datetime] = {}  # event id -> the NotBefore its reply carries
        self.missing_header = 0
        super().__init__()

    def schedule(
        self, event_type: str = "Preempt", seconds: float = 30.0, resources: list[str] | None = None
    ) -> str:
        event_id = str(uuid.uuid4()).upper()
        when = (datetime.now(timezone.utc) + timedelta(seconds=seconds)).replace(microsecond=0)
        self.not_before[str(event_id)] = when
        not_before = format_datetime(when, usegmt=True)
        with self.lock:
            self.events.append(
                {
                    "EventId": event_id,
                    "EventType": event_type,
                    "ResourceType": "VirtualMachine",
                    "Resources": [self.vm_name] if resources is None else resources,
                    "EventStatus": "Scheduled",
                    "NotBefore": not_before,
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            )
            self.incarnation += 1
        return event_id

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.headers.get("metadata") != "true":
            self.missing_header += 1
            return _json(400, {"error": "Bad request. Required metadata header not specified"})
        if req.path == "/metadata/instance/compute/name":
            return _text(200, self.vm_name)
        if req.path != "/metadata/scheduledevents":
            return _text(404, "Not Found")
        if req.method == "POST":
            ids = [str(r.get("EventId")) for r in json.loads(req.body).get("StartRequests", [])]
            with self.lock:
                self.acks.append((time.monotonic(), ids))
                self.events = [e for e in self.events if e["EventId"] not in ids]
                self.incarnation += 1
            return _text(200, "")
        with self.lock:
            return _json(200, {"DocumentIncarnation": self.incarnation, "Events": list(self.events)})


class FakeAzurePrices(FakeServer):
    """Two pages: Windows and on-demand items first, the Linux spot item on the second page."""

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        def item(meter: str, product: str, price: float) -> dict[str, Any]:
            return {
                "currencyCode": "USD",
                "retailPrice": price,
                "unitOfMeasure": "1 Hour",
                "meterName": meter,
                "productName": product,
                "armSkuName": "Standard_NC4as_T4_v3",
                "type": "Consumption",
            }

        if req.query.get("page") == "2":
            return _json(
                200, {"Items": [item("NC4as T4 v3 Spot", "Virtual Machines NCasT4 v3 Series", 0.1578)]}
            )
        return _json(
            200,
            {
                "Items": [
                    item("NC4as T4 v3 Spot", "Virtual Machines NCasT4 v3 Series Windows", 0.25),
                    item("NC4as T4 v3", "Virtual Machines NCasT4 v3 Series", 0.526),
                    item("NC4as T4 v3 Low Priority", "Virtual Machines NCasT4 v3 Series", 0.1),
                ],
                "NextPageLink": f"{self.url}/api/retail/prices?page=2",
            },
        )


class Proxy:
    """TCP proxy 127.0.0.1:port -> 127.0.0.1:target; `cut()` is an outage, `restore()` ends it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self.restore()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        with self.lock:
            if self.listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            conns, self.conns = self.conns, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
            with contextlib.suppress(OSError):
                c.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                if self.listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


# --- a harness for running the agent as a process -------------------------------------------------

AGENT_TAG = "SPOTEVAL_TEST_TAG"


def episode_command(
    *,
    seconds: float = 0.05,
    max_seconds: float | None = None,
    fail_rate: float = 0.0,
    seed: int = 0,
    trace: str | None = None,
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "spoteval.sample_episode",
        "--episode-id",
        "{episode_id}",
        "--model-url",
        "{model_url}",
        "--output",
        "{output}",
        "--seconds",
        str(seconds),
        "--fail-rate",
        str(fail_rate),
        "--seed",
        str(seed),
    ]
    if max_seconds is not None:
        argv += ["--max-seconds", str(max_seconds)]
    if trace is not None:
        argv += ["--trace", trace]
    return argv


def agent_config(
    store_url: str,
    store_options: dict[str, Any],
    run_id: str,
    state_dir: Path,
    *,
    node: str = "n1",
    provider: str = "local",
    concurrency: int = 4,
    max_attempts: int = 2,
    timeout_s: float = 30.0,
    heartbeat_s: float = 0.5,
    command: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    port = free_port()
    config: dict[str, Any] = {
        "run_id": run_id,
        "store": store_url,
        "store_options": store_options,
        "node": {
            "id": node,
            "provider": provider,
            "region": "test-1",
            "zone": "test-1a",
            "instance_type": "gpu.1",
        },
        "server": {
            "command": [sys.executable, "-m", "spoteval.standin", "--port", str(port)],
            "url": f"http://127.0.0.1:{port}",
            "ready_timeout_s": 30,
        },
        "episodes": {
            "command": command or episode_command(),
            "concurrency": concurrency,
            "max_attempts": max_attempts,
            "timeout_s": timeout_s,
        },
        "heartbeat_s": heartbeat_s,
        "spool_dir": str(state_dir / "spool"),
        "work_dir": str(state_dir / "work"),
        "boot_file": str(state_dir / "boot.json"),
    }
    config.update(extra)
    return config


def write_config(path: Path, config: dict[str, Any]) -> str:
    path.write_text(json.dumps(config, indent=1))
    return str(path)


def write_manifest(path: Path, ids: list[str]) -> str:
    path.write_text("".join(json.dumps({"id": i, "n": k}) + "\n" for k, i in enumerate(ids)))
    return str(path)


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    tag: str
    stderr_path: Path

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def signal_all(self, sig: int) -> int:
        """Signal every process this agent started (all carry its tag): a node shutting down or lost."""
        return signal_tagged(self.tag, sig)


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment carries `SPOTEVAL_TEST_TAG=tag` (this test's agent and children)."""
    needle = f"{AGENT_TAG}={tag}".encode()
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def signal_tagged(tag: str, sig: int) -> int:
    pids = tagged_pids(tag)
    if sig == signal.SIGKILL:  # freeze first, so none of them reacts to the others dying
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return len(pids)


def start_agent(config_path: str, workdir: Path, *, args: list[str] | None = None) -> AgentProcess:
    tag = uuid.uuid4().hex
    stderr_path = workdir / f"agent-{tag[:8]}.log"
    env = {**os.environ, AGENT_TAG: tag, "PYTHONUNBUFFERED": "1"}
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spoteval.agent", *(args or []), "--config", config_path],
            cwd=REPO,
            env=env,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return AgentProcess(proc, tag, stderr_path)


def cleanup_tagged(agent: AgentProcess) -> None:
    signal_tagged(agent.tag, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        agent.proc.wait(timeout=10)


@dataclass
class RunRecord:
    events: list[Event]
    attempts: dict[str, list[Attempt]]
    results: dict[str, Attempt]

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.reason) for e in self.events if e.kind != "heartbeat"]

    def outcomes(self, episode: str) -> list[str]:
        return [a.outcome for a in self.attempts.get(episode, [])]


def read_record(store: Store, run_id: str) -> RunRecord:
    layout = RunLayout(run_id)
    events = []
    for key in store.list(layout.events_prefix):
        data = store.get(key)
        assert data is not None
        event, problems = Event.loads(data)
        assert problems == [], (key, problems)
        events.append(event)
    events.sort(key=lambda e: e.time)
    attempts: dict[str, list[Attempt]] = {}
    for key in store.list(layout.attempts_prefix):
        parsed = layout.attempt_of_key(key)
        assert parsed is not None, key
        data = store.get(key)
        assert data is not None
        attempt, problems = Attempt.loads(data)
        assert problems == [], (key, problems)
        assert attempt.attempt == parsed[1] and attempt.episode_id == parsed[0], key
        attempts.setdefault(parsed[0], []).append(attempt)
    for items in attempts.values():
        items.sort(key=lambda a: a.attempt)
    results: dict[str, Attempt] = {}
    for key in store.list(layout.results_prefix):
        episode = layout.episode_of_result(key)
        assert episode is not None, key
        data = store.get(key)
        assert data is not None
        result, problems = Attempt.loads(data, as_result=True)
        assert problems == [], (key, problems)
        results[episode] = result
    return RunRecord(events, attempts, results)


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
