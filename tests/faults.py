"""Fault injection on loopback for the agent's tests: broken metadata replies, a store that refuses or
vanishes, a model server that answers garbage, a spool disk that fills up, an obstore panic.

- `FaultyFront`: a TCP front for one of the fake metadata services (tests/fake_metadata.py). The next
  requests get the faults queued with `inject(...)` (a truncated body, bytes that are not HTTP, a 500,
  a 200 whose body is not UTF-8, a connection closed without a reply); every other request goes
  through to the fake unchanged (urllib sends `Connection: close`, so one request per connection).
- `FakeGcpMaintenance`: the GCP fake plus `instance/maintenance-event` (`NONE` until the test
  schedules `TERMINATE_ON_HOST_MAINTENANCE`), with the same ETag / `wait_for_change` long poll, and
  optionally replies without an ETag header.
- `GatedPrices`: the Azure Retail Prices fake whose answers wait until the test opens a gate (so a
  test can act while the agent is between its boot steps) and whose price the test can change.
- `StoreFront`: an HTTP-aware TCP proxy in front of moto or Azurite with modes: `pass`, `cut` (new
  connections refused, open ones reset), `deny` (every request answered 403 AccessDenied), `fail_writes`
  (PUTs answered 503 SlowDown, reads pass). Switching mode resets open connections.
- `tmpfs(path, size)`: mounts a small tmpfs (needs root); `None` with the reason when it cannot.
- `start_agent_via(module, ...)`: `start_agent` for a wrapper module (see tests/faulty_agent.py).
- `python -m tests.faults garbage-server --port P --bad N`: a model server whose first N health
  checks get bytes that are not HTTP, then the stand-in's answers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.fake_metadata import AGENT_TAG, AgentProcess, FakeAzurePrices, FakeGcp, _Request, _text
from tests.servers import REPO

# --- raw HTTP pieces ---------------------------------------------------------------------------------

#: fault name -> the bytes sent back (the connection is then closed)
METADATA_FAULTS: dict[str, bytes] = {
    # promises 400 bytes, sends 4: http.client raises IncompleteRead on read()
    "truncated": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 400\r\n\r\nTRUE",
    # not HTTP at all: BadStatusLine
    "garbage": b"\x00\xff\xfeSSH-2.0-not-http\r\n\r\n",
    "500": (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
        b"Connection: close\r\n\r\noops!"
    ),
    # a 200 whose body is not UTF-8 (a token or a flag that cannot be decoded)
    "bad_utf8": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\nConnection: close\r\n\r\n"
        b"\xff\xfe\xfa\xfb"
    ),
    # accepted, then closed without a byte: RemoteDisconnected
    "hangup": b"",
}


def read_request(conn: socket.socket, buffered: bytes = b"") -> tuple[bytes, bytes] | None:
    """One HTTP request from `conn` (head + Content-Length or chunked body): (request, leftover bytes)."""
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            headers[k.strip().lower()] = v.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:  # read until the terminating zero-length chunk
            if b"0\r\n\r\n" in rest:
                end = rest.index(b"0\r\n\r\n") + 5
                return head + b"\r\n\r\n" + rest[:end], rest[end:]
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
    length = int(headers.get(b"content-length", b"0") or 0)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


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


# --- metadata faults ---------------------------------------------------------------------------------


class FaultyFront:
    """127.0.0.1:port -> the fake at `target_url`, with queued faults answered first."""

    def __init__(self, target_url: str) -> None:
        self.target_port = int(target_url.rsplit(":", 1)[1])
        self.lock = threading.Lock()
        self.pending: list[str] = []
        self.served: list[tuple[str, bytes]] = []  # (fault, request line) in order
        self.passed = 0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(self, *faults: str) -> None:
        for fault in faults:
            assert fault in METADATA_FAULTS, fault
        with self.lock:
            self.pending.extend(faults)

    def left(self) -> int:
        with self.lock:
            return len(self.pending)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            got = read_request(conn)
            if got is None:
                conn.close()
                return
            request, rest = got
            with self.lock:
                fault = self.pending.pop(0) if self.pending else None
                if fault is not None:
                    self.served.append((fault, request.split(b"\r\n", 1)[0]))
                else:
                    self.passed += 1
            if fault is not None:
                conn.sendall(METADATA_FAULTS[fault])
                conn.close()
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            upstream.settimeout(None)
            upstream.sendall(request + rest)
            threading.Thread(target=_pipe, args=(conn, upstream), daemon=True).start()
            _pipe(upstream, conn)
        except OSError:
            with contextlib.suppress(OSError):
                conn.close()


class FakeGcpMaintenance(FakeGcp):
    """The GCP fake plus `instance/maintenance-event`; `etags=False` answers without ETag headers."""

    MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"

    def __init__(self, *, etags: bool = True) -> None:
        self.maintenance = "NONE"
        self.maintenance_etag = "m0"
        self.etags = etags
        super().__init__()

    def schedule_maintenance(self, value: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        with self.changed:
            self.maintenance, self.maintenance_etag = value, f"m{uuid.uuid4().hex[:6]}"
            self.changed.notify_all()

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.headers.get("metadata-flavor") == "Google" and req.path == self.MAINTENANCE:
            if req.query.get("wait_for_change") == "true":
                timeout = float(req.query.get("timeout_sec", "60"))
                with self.changed:
                    self.changed.wait_for(
                        lambda: self.maintenance_etag != req.query.get("last_etag"), timeout=timeout
                    )
            headers = {"ETag": self.maintenance_etag} if self.etags else {}
            return _text(200, self.maintenance, **headers)
        status, headers, body = super().handle(req)
        if not self.etags:
            headers = {k: v for k, v in headers.items() if k.lower() != "etag"}
        return status, headers, body


class GatedPrices(FakeAzurePrices):
    """Retail Prices whose answers wait for `gate` (set by default); `price` is the Linux spot price."""

    def __init__(self, price: float = 0.1578) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.asked = threading.Event()
        self.price = price
        super().__init__()

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        self.asked.set()
        self.gate.wait(30)
        status, headers, body = super().handle(req)
        doc = json.loads(body)
        for item in doc.get("Items", []):
            if item["meterName"] == "NC4as T4 v3 Spot" and "Windows" not in item["productName"]:
                item["retailPrice"] = self.price
        return status, headers, json.dumps(doc).encode()


# --- store faults ------------------------------------------------------------------------------------

_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


def _reply(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nx-ms-error-code: AuthorizationFailure\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class StoreFront:
    """A proxy before a store server whose mode the test switches: pass, cut, deny, fail_writes."""

    MODES = ("pass", "cut", "deny", "fail_writes")

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.lock = threading.Lock()
        self.mode = "pass"
        self.conns: list[socket.socket] = []
        self.answered: dict[str, int] = {"deny": 0, "fail_writes": 0}
        self.listener: socket.socket | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, mode: str) -> None:
        assert mode in self.MODES, mode
        with self.lock:
            self.mode = mode
            conns, self.conns = self.conns, []
            listener = self.listener if mode == "cut" else None
            if mode == "cut":
                self.listener = None
        for c in conns:
            _reset(c)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if mode != "cut":
            self._listen()

    def close(self) -> None:
        self.set("cut")

    def _listen(self) -> None:
        with self.lock:
            if self.listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self.lock:
                if self.listener is not listener:
                    client.close()
                    return
                self.conns.append(client)
                mode = self.mode
            if mode == "pass":
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                except OSError:
                    _reset(client)
                    continue
                upstream.settimeout(None)
                with self.lock:
                    self.conns.append(upstream)
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()
            else:
                threading.Thread(target=self._answer, args=(client, mode), daemon=True).start()

    def _answer(self, client: socket.socket, mode: str) -> None:
        """Answer every request on this connection by the mode it was opened in (keep-alive)."""
        upstream: socket.socket | None = None
        rest = b""
        try:
            while True:
                got = read_request(client, rest)
                if got is None:
                    return
                request, rest = got
                method = request.split(b" ", 1)[0]
                if mode == "deny":
                    with self.lock:
                        self.answered["deny"] += 1
                    client.sendall(_reply("403 Forbidden", _DENIED))
                elif mode == "fail_writes" and method in (b"PUT", b"POST", b"DELETE"):
                    with self.lock:
                        self.answered["fail_writes"] += 1
                    client.sendall(_reply("503 Slow Down", _SLOW_DOWN))
                else:  # a read while writes fail: one request through a fresh upstream connection
                    if upstream is None:
                        upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
                        with self.lock:
                            self.conns.append(upstream)
                    upstream.sendall(request)
                    reply, _ = _read_response(upstream)
                    client.sendall(reply)
        except OSError:
            pass
        finally:
            _reset(client)
            if upstream is not None:
                _reset(upstream)


def _read_response(conn: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP response (Content-Length or chunked; HEAD-style empty bodies by status)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("upstream closed")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for line in lines[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            headers[k.strip().lower()] = v.strip()
    if status in (204, 304) or status < 200:
        return head + b"\r\n\r\n", rest
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = conn.recv(65536)
            if not chunk:
                raise OSError("upstream closed")
            rest += chunk
        return head + b"\r\n\r\n" + rest, b""
    length = int(headers.get(b"content-length", b"0") or 0)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("upstream closed")
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


# --- a small disk --------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[str | None]:
    """Mount a tmpfs of `size` at `path` for the block; yields None, or why it could not be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield "mounting a tmpfs needs root"
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


# --- agents through a wrapper --------------------------------------------------------------------------


def start_agent_via(
    module: str,
    config_path: str,
    workdir: Path,
    *,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> AgentProcess:
    """`start_agent` through `python -m module ARGS -- --config FILE` (the wrapper runs the agent)."""
    tag = uuid.uuid4().hex
    stderr_path = workdir / f"agent-{tag[:8]}.log"
    full_env = {**os.environ, **(env or {}), AGENT_TAG: tag, "PYTHONUNBUFFERED": "1"}
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--", "--config", config_path],
            cwd=REPO,
            env=full_env,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return AgentProcess(proc, tag, stderr_path)


# --- a model server that answers garbage first ----------------------------------------------------------


def garbage_server(port: int, bad: int) -> None:
    """Health checks 1..bad get bytes that are not HTTP; then `/health` answers 200."""
    count = {"n": 0}
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                count["n"] += 1
                n = count["n"]
            if n <= bad:
                self.wfile.write(b"\x00\xffnot-http\r\n\r\n")
                self.close_connection = True
                return
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
    httpd.daemon_threads = True
    httpd.serve_forever(poll_interval=0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults")
    parser.add_argument("what", choices=("garbage-server",))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bad", type=int, default=3)
    args = parser.parse_args(argv)
    garbage_server(args.port, args.bad)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# --- episode traces (spoteval.sample_episode --trace) ------------------------------------------------


def traced_attempts(path: Path) -> dict[str, tuple[str, int | None]]:
    """Attempt name (`{episode}.{incarnation}.{dispatch}`) -> (episode, exit code or None if killed)."""
    out: dict[str, tuple[str, int | None]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[0] == "start" and len(parts) >= 4:
            out[parts[3]] = (parts[1], None)
        elif parts[0] == "end" and len(parts) >= 5:
            out[parts[4]] = (parts[1], int(parts[3]))
    return out


def attempt_name(attempt: Any) -> str:
    return f"{attempt.episode_id}.{attempt.details['incarnation']}.{attempt.details['dispatch']}"


def start_atomic_moto() -> Any:
    """moto whose create-only writes are atomic, as S3's are (see tests/atomic_moto.py)."""
    from tests import servers

    port = servers.free_port()
    boot = f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.atomic_moto import main; main()"
    argv = [sys.executable, "-c", boot, "-H", "127.0.0.1", "-p", str(port)]
    server = servers._launch("moto-atomic", argv, port, "/moto-api/")
    server.env = {"AWS_ENDPOINT_URL": server.url}
    return server
