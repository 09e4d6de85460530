"""What a drill test's nodes leave behind, even when pytest itself is stopped.

The drill starts each node in a session of its own (as a machine of its own), so neither Ctrl-C nor
a SIGTERM to pytest reaches it: a pytest stopped mid-test would leave the node's agent and its
model server (vLLM's engine and worker, about 2 GB) running. `NodeGuard(folder)` ends them.

"The node's processes" are those marked with the drill's folder (in their command line or
environment: the node's init, the agent, its episodes; spoteval/agent/procgroup.py `marked`) and,
noted every second while the guard is active, all their descendants: vLLM's engine core and worker
rename themselves (setproctitle), which overwrites the command line and the environment /proc
shows, so no mark is left on them, and an orphan is no one's descendant any more. Each is noted by
pid and start time (spoteval/drill/procs.py `started`), so a pid the machine reuses later for
another process is never taken for one of them.

- a watchdog process, in a session of its own, reads a pipe whose only writer is pytest (the
  processes noted, a line each); when the pipe closes (the guard ends, or pytest exits in any way,
  SIGKILL included) it SIGKILLs those processes and the marked ones, with their process groups;
- while the guard is active, SIGTERM to pytest raises KeyboardInterrupt, so that the drill's own
  `finally` (it stops its nodes) and the fixtures' teardown run;
- `seen`: the `/dev/shm` segments the node's processes held (what "the shared memory of ours" is,
  whatever its name); `left()`: which of its processes are still alive.
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
from spoteval.drill.procs import descendants, processes, started
from tests.servers import REPO

#: the watchdog: read the noted processes ("pid start" lines) to EOF, then kill them and what is
#: marked with the folder argv[1] names (in hex: its own command line must not hold the folder, or
#: every check for what is left of the nodes would find the watchdog), each with its process group
#: unless that is pytest's (argv[2]: a short command the drill ran itself)
_WATCHDOG: Final = """
import os, signal, sys
from spoteval.agent.procgroup import marked
from spoteval.drill.procs import started
marker = bytes.fromhex(sys.argv[1]).decode()
noted = {tuple(map(int, line.split())) for line in sys.stdin if line.strip()}
for _ in range(3):
    pids = set(marked(marker)) | {pid for pid, start in noted if started(pid) == start}
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
        self.noted: set[tuple[int, int]] = set()  # (pid, start time) of every process of the nodes
        self._stop = threading.Event()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._note, name="node-guard", daemon=True)

    def _ours(self) -> set[int]:
        """The marked processes and their descendants, now."""
        roots = marked(self.marker)
        table = processes()
        return set(roots) | {p.pid for root in roots for p in descendants(root, table)}

    def _note(self) -> None:
        while not self._stop.wait(NOTE_EVERY_S):
            with contextlib.suppress(OSError, ValueError):
                ours = self._ours()
                for pid in ours:
                    start = started(pid)
                    if start is not None and (pid, start) not in self.noted:
                        self.noted.add((pid, start))
                        assert self._watchdog is not None and self._watchdog.stdin is not None
                        self._watchdog.stdin.write(f"{pid} {start}\n".encode())
                        self._watchdog.stdin.flush()
                self.seen |= shm_held(ours)

    def left(self) -> list[int]:
        """The node's processes still alive: marked, or noted while the guard was active."""
        noted = {pid for pid, start in self.noted if started(pid) == start}
        return sorted((set(marked(self.marker)) | noted) - {os.getpid()})

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
