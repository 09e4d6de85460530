"""What a drill test's nodes leave behind, even when pytest itself is stopped.

The drill starts each node in a session of its own (as a machine of its own), so neither Ctrl-C nor
a SIGTERM to pytest reaches it: a pytest stopped mid-test would leave the node's agent and its
model server (vLLM's engine and worker, about 2 GB) running. `NodeGuard(folder)` ends them:

- a watchdog process, in a session of its own, reads a pipe whose only writer is pytest; when the
  pipe closes (the guard ends, or pytest exits in any way, SIGKILL included) it SIGKILLs every
  process marked with the drill's folder (in its command line or environment: the node's init, the
  agent, its episodes and server; spoteval/agent/procgroup.py `marked`) and their process groups;
- while the guard is active, SIGTERM to pytest raises KeyboardInterrupt, so that the drill's own
  `finally` (it stops its nodes) and the fixtures' teardown run;
- every second it notes the `/dev/shm` segments those processes hold (`seen`): what "the shared
  memory of ours" is, whatever its name, for the check that none of it is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Final

from spoteval.agent.procgroup import marked, shm_held
from tests.servers import REPO

#: the watchdog: wait for EOF on stdin, then kill what is marked with the folder argv[1] names (in
#: hex: its own command line must not hold the folder, or every check for what is left of the
#: nodes would find the watchdog), with its process group unless that is pytest's (argv[2]: a short
#: command the drill ran itself)
_WATCHDOG: Final = """
import os, signal, sys
from spoteval.agent.procgroup import marked
marker = bytes.fromhex(sys.argv[1]).decode()
sys.stdin.buffer.read()
for _ in range(3):
    pids = marked(marker)
    if not pids:
        break
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != int(sys.argv[2]):
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""
NOTE_EVERY_S: Final = 1.0


class NodeGuard:
    def __init__(self, folder: Path) -> None:
        self.marker = str(folder.resolve())
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._note, name="node-guard", daemon=True)

    def _note(self) -> None:
        while not self._stop.wait(NOTE_EVERY_S):
            with contextlib.suppress(OSError, ValueError):
                self.seen |= shm_held(marked(self.marker))

    @contextlib.contextmanager
    def active(self) -> Iterator[NodeGuard]:
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, self.marker.encode().hex(), str(os.getpgrp())],
            stdin=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,  # a Ctrl-C to pytest's terminal does not reach it
        )
        previous = signal.getsignal(signal.SIGTERM)

        def interrupt(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, interrupt)
        self._thread.start()
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)
            self._stop.set()
            self._thread.join(timeout=10)
            assert self._watchdog.stdin is not None
            self._watchdog.stdin.close()  # the watchdog ends what is left now
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=30)
