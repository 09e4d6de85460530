"""The stand-in model server with two faults, for the harness tests (loopback only).

- `gate=N`: the first N completion requests are answered as the stand-in answers them; later ones
  wait until `release()` (or the server's shutdown, then 503). A shard running against it
  finishes exactly N samples and then stalls in the middle, where a test can kill it.
- `fail=True`: every completion request gets HTTP 500 (a model server that is up but failing).

As a command (a drill's `--server-command`, which restarts it with every node start):

    python -m tests.fake_model --port PORT [--gate N --once MARKER]

`--once MARKER`: the gate closes only in the first server started with this marker file absent
(the server creates it), so a node started again after a preemption finishes the shard.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from spoteval import standin
from spoteval.cli import OneLineParser


class FaultyServer(standin.StandinServer):
    def __init__(self, gate: int | None = None, fail: bool = False, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), standin.DEFAULT_MODEL, 0.0)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m tests.fake_model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gate", type=int, help="answer N completions, then hold the rest")
    parser.add_argument("--once", help="close the gate only if this marker file does not exist yet")
    args = parser.parse_args(argv)
    gate = args.gate
    if gate is not None and args.once is not None:
        try:
            os.close(os.open(args.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            gate = None  # a later start: answer everything
    server = FaultyServer(gate=gate, port=args.port)

    def stop(signum: int, frame: object) -> None:
        server.release()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"fake model serving on {server.base_url} (gate {gate})", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
