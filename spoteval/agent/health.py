"""The model server under a prober thread: started, stopped, and its health known without asking.

`ServerWatch.start()` starts the server (spoteval/agent/episodes.py `ModelServer`) and a thread that
checks its health URL (1 s timeout): every 0.1 s until it first answers (`healthy_mono`, and
`checked` is set), then every `HEALTH_EVERY_S`, keeping `ok` current. The agent's loop and its
shutdown read `ok` and never make a health check themselves, so a slow or hung server cannot hold
up a notice. A check that fails in a way that is not a connection error (a reply that is not HTTP)
is logged, throttled, and counts as not healthy; a prober that ends by any exception is logged and
started again. `stop()` ends the server (its whole process group and shared memory) and its prober;
`start()` again gives a new one of each. While the server starts, its log is followed
(spoteval/agent/server_phases.py) for its start-up phases; `phases()` gives them for `ready`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from spoteval.agent import server_phases
from spoteval.agent.episodes import ModelServer

HEALTH_EVERY_S: Final = 1.0  # between checks once healthy; also each check's timeout
NOTE_SHM_EVERY: Final = 5  # health checks between two notes of the server's shared memory
COMPLAIN_EVERY_S: Final = 60.0


class ServerWatch:
    def __init__(self, server: ModelServer, stopping: threading.Event, log: Callable[[str], None]) -> None:
        self.server = server
        self.stopping = stopping
        self.log = log
        self.healthy_mono: float | None = None  # when the health URL first answered
        self.ok = False  # the last check's answer
        self.checked = threading.Event()  # healthy, or it never will be (exited, timed out)
        self._generation = 0
        self.server_log = server_phases.ServerLog(server.log_path, log)

    @property
    def running(self) -> bool:
        return self.server.proc is not None and self.server.exit_code() is None

    def start(self) -> None:
        self.server_log.start()
        self.server.start()
        if self.server.left_behind:
            self.log(
                f"removed {len(self.server.left_behind)} shared memory segment(s) an earlier model server "
                "left on this node"
            )
        self._generation += 1
        self.healthy_mono, self.ok = None, False
        self.checked.clear()
        generation = self._generation
        threading.Thread(target=self._supervise, args=(generation,), name="health", daemon=True).start()

    def stop(self, grace_s: float = 5.0) -> None:
        self._generation += 1  # this server's prober ends
        self.server_log.stop()
        end = self.server.stop(grace_s=grace_s)
        self.ok = False
        if end is not None and (end.killed or end.left or end.shm_removed):
            self.log(
                f"model server stopped: {end.members} process(es) in its group, {end.killed} killed after "
                f"{grace_s:g} s, {end.left} left; {len(end.shm_removed)} shared memory segment(s) "
                f"({end.shm_bytes} bytes) removed"
            )

    def phases(self) -> dict[str, object]:
        """The server's start-up phases and what its log said (empty for an external server)."""
        if not self.server.config.command:
            return {}
        marks = self.server_log.marks()
        self.server_log.stop()  # the start-up is over: the rest of the log is not followed
        return server_phases.details(marks, self.server.started_mono, self.healthy_mono)

    def _current(self, generation: int) -> bool:
        return generation == self._generation and not self.stopping.is_set()

    def _supervise(self, generation: int) -> None:
        while self._current(generation):
            try:
                self._probe(generation)
                return
            except BaseException as exc:  # a prober must never be silently gone
                self.log(f"health probe failed: {exc!r}; restarting it")
                time.sleep(HEALTH_EVERY_S)

    def _probe(self, generation: int) -> None:
        deadline = time.monotonic() + self.server.config.ready_timeout_s
        last_complaint = -1e18
        checks = 0
        while self._current(generation):
            checks += 1
            try:
                ok = self.server.healthy(timeout=HEALTH_EVERY_S)
            except Exception as exc:
                ok = False
                if time.monotonic() - last_complaint >= COMPLAIN_EVERY_S:
                    last_complaint = time.monotonic()
                    self.log(f"health probe: check failed ({exc!r}); probing on")
            self.ok = ok
            if self.healthy_mono is None:
                if ok:
                    self.healthy_mono = time.monotonic()
                    self.server.note_shm()
                    self.checked.set()
                elif self.server.exit_code() is not None or time.monotonic() >= deadline:
                    self.checked.set()
                    return
            elif checks % NOTE_SHM_EVERY == 0:  # segments made later (a semaphore) are removed too
                self.server.note_shm()
            time.sleep(0.1 if self.healthy_mono is None else HEALTH_EVERY_S)
