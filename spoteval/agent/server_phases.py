"""The model server's start-up, phase by phase, from its own log lines (vLLM's; standard library only).

`ServerLog` follows the server's log file in a thread (every `FOLLOW_EVERY_S`), and notes when each
line it knows first appeared (this process's monotonic clock: the same clock as the server's spawn
and its first healthy answer). `phases(...)` turns those marks into seconds per phase:

| phase | from -> to (vLLM's line) |
|---|---|
| `imports` | the server's spawn -> its first log line (the version banner or `non-default args`) |
| `model_inspection` | -> `Resolved architecture: ...` (config, tokenizer, the model registry's inspection) |
| `engine_start` | -> `Starting to load model ...` (engine core and worker processes up) |
| `weight_load` | -> `Loading weights took ...` / `Model loading took ...` |
| `compile_warmup` | -> `Warming up done` / `init engine (...) took` (compiling, warm-up) |
| `api_start` | -> `Starting vLLM server on ...` / `Application startup complete` |
| `ready` | -> the first healthy answer of the health URL |

A phase is there only when both of its ends were seen, in that order; a line the parser does not
know is ignored, and a missing one leaves its phases out (nothing is invented). Beside the phases:
what the server said of its compile cache (`compile_cache`: `loaded` when it loaded its compiled
model, `compiled` when it compiled it, also after a failed load: vLLM 0.32 on CPU fails to load its
own AOT artifact, "'function' object has no attribute 'finalize_loading'", and compiles again)
and the durations it printed itself (`reported`: seconds, by what they measure). Another server's
log gives no phases.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

FOLLOW_EVERY_S: Final = 0.1
MAX_LINE: Final = 64 * 1024  # longer lines are cut (a traceback's repr); the marks are at the start

#: (mark, pattern): the first line that matches sets the mark's time.
MARKS: Final = (
    ("first_line", re.compile(r"vLLM API server version|non-default args:|\bversion \d+\.\d+\.\d+")),
    ("architecture", re.compile(r"Resolved architecture: ")),
    ("load_start", re.compile(r"Starting to load model ")),
    ("weights", re.compile(r"Loading weights took |Model loading took ")),
    ("warm", re.compile(r"init engine \(profile, create kv cache, warmup model\) took|Warming up done")),
    ("api", re.compile(r"Starting vLLM (?:API )?server on|Application startup complete")),
)
#: (phase, from mark, to mark); `spawn` and `healthy` are the agent's own marks.
PHASES: Final = (
    ("imports", "spawn", "first_line"),
    ("model_inspection", "first_line", "architecture"),
    ("engine_start", "architecture", "load_start"),
    ("weight_load", "load_start", "weights"),
    ("compile_warmup", "weights", "warm"),
    ("api_start", "warm", "api"),
    ("ready", "api", "healthy"),
)
PHASE_NAMES: Final = tuple(name for name, _, _ in PHASES)

_CACHE_FACTS: Final = (
    ("compile_cache", "loaded", re.compile(r"Directly load (?:AOT compilation|the compiled graph)")),
    ("compile_cache", "compiled", re.compile(r"Compiling model again|saved AOT compiled|Compiling a graph")),
)
_REPORTED: Final = (
    ("weights_s", re.compile(r"Loading weights took ([0-9.]+) s")),
    ("model_load_s", re.compile(r"Model loading took [0-9.]+ Gi?B (?:memory )?and ([0-9.]+) s")),
    ("torch_compile_s", re.compile(r"torch\.compile takes ([0-9.]+) s in total")),
    ("init_engine_s", re.compile(r"warmup model\) took ([0-9.]+) s")),
)


@dataclass
class LogMarks:
    """What the server's log said, with when this process first saw each line it knows."""

    seen: dict[str, float] = field(default_factory=dict)  # mark -> monotonic time
    facts: dict[str, str] = field(default_factory=dict)  # compile_cache, model_info_cache
    reported: dict[str, float] = field(default_factory=dict)  # the server's own durations

    def feed(self, line: str, now: float) -> None:
        for mark, pattern in MARKS:
            if mark not in self.seen and pattern.search(line):
                self.seen[mark] = now
        for fact, value, pattern in _CACHE_FACTS:
            # a load that failed and compiled again counts as compiled: the last word wins
            if pattern.search(line) and (self.facts.get(fact) != "compiled" or value == "compiled"):
                self.facts[fact] = value
        for name, pattern in _REPORTED:
            found = pattern.search(line)
            if found and name not in self.reported:
                with contextlib.suppress(ValueError):
                    self.reported[name] = float(found.group(1))


def phases(marks: LogMarks, spawn: float | None, healthy: float | None) -> dict[str, float]:
    """Seconds per phase where both ends were seen in order (see the module docstring)."""
    at: dict[str, float] = dict(marks.seen)
    if spawn is not None:
        at["spawn"] = spawn
    if healthy is not None:
        at["healthy"] = healthy
    out: dict[str, float] = {}
    for name, begin, end in PHASES:
        if begin in at and end in at and at[end] >= at[begin]:
            out[name] = round(at[end] - at[begin], 3)
    return out


def details(marks: LogMarks, spawn: float | None, healthy: float | None) -> dict[str, Any]:
    """The `ready` event's `server_phases` and `server_log` (empty when the log said nothing known)."""
    found = phases(marks, spawn, healthy)
    out: dict[str, Any] = {}
    if found:
        out["server_phases"] = found
    log: dict[str, Any] = {**marks.facts}
    if marks.reported:
        log["reported"] = dict(marks.reported)
    if log:
        out["server_log"] = log
    return out


class ServerLog:
    """Follows the server's log file from its size at `start()` on, feeding each new line to marks.

    One thread per start; `stop()` ends it. Reads what is there when asked for `marks()` too, so a
    line written just before the server became healthy is never missed."""

    def __init__(self, path: str, log: Callable[[str], None]) -> None:
        self.path = path
        self.log = log
        self._lock = threading.Lock()
        self._marks = LogMarks()
        self._offset = 0
        self._partial = b""
        self._generation = 0

    def start(self) -> None:
        with self._lock:
            self._generation += 1
            self._marks = LogMarks()
            try:
                self._offset = os.path.getsize(self.path)
            except OSError:
                self._offset = 0
            self._partial = b""
            generation = self._generation
        threading.Thread(target=self._follow, args=(generation,), name="server-log", daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            self._generation += 1

    def marks(self) -> LogMarks:
        with self._lock:
            self._read()
            return LogMarks(dict(self._marks.seen), dict(self._marks.facts), dict(self._marks.reported))

    def _follow(self, generation: int) -> None:
        while True:
            with self._lock:
                if generation != self._generation:
                    return
                try:
                    self._read()
                except Exception as exc:  # a follower must not take the agent down; phases go missing
                    self.log(f"server log follower: {exc!r}; phases from here on are not read")
                    return
            time.sleep(FOLLOW_EVERY_S)

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        now = time.monotonic()
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-MAX_LINE:]
        for raw in lines:
            self._marks.feed(raw[:MAX_LINE].decode(errors="replace"), now)


def merged(*parts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out
