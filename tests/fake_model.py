"""The stand-in model server with two faults, for the harness tests (loopback only).

- `gate=N`: the first N completion requests are answered as the stand-in answers them; later ones
  wait until `release()` (or the server's shutdown, then 503). A shard running against it
  finishes exactly N samples and then stalls in the middle, where a test can kill it.
- `fail=True`: every completion request gets HTTP 500 (a model server that is up but failing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from spoteval import standin


class FaultyServer(standin.StandinServer):
    def __init__(self, gate: int | None = None, fail: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), standin.DEFAULT_MODEL, 0.0)
        self.RequestHandlerClass = _Handler
        self.gate = gate
        self.fail = fail
        self.answered = 0
        self.lock = threading.Lock()
        self.opened = threading.Event()

    def release(self) -> None:
        self.opened.set()


class _Handler(standin._Handler):
    server: FaultyServer

    def do_POST(self) -> None:
        srv = self.server
        if srv.fail:
            self._read_json()
            self._error(500, "the model crashed", "server_error")
            return
        if srv.gate is not None:
            with srv.lock:
                admitted = srv.answered < srv.gate
                if admitted:
                    srv.answered += 1
            if not admitted and not srv.opened.wait(timeout=120):
                self._read_json()
                self._error(503, "gate closed", "server_error")
                return
        super().do_POST()


@contextmanager
def running(gate: int | None = None, fail: bool = False) -> Iterator[FaultyServer]:
    server = FaultyServer(gate=gate, fail=fail)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release()
        server.shutdown()
        server.server_close()
