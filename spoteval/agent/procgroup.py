"""A process group's whole end: every member stopped, and the shared memory it held removed.

The model server runs in a process group of its own (spoteval/agent/episodes.py `ModelServer`).
vLLM's API server spawns an engine core and a worker into that group; when the API server alone is
killed, they live on as orphans (about 2 GB here) and keep their segments in `/dev/shm`. So the
agent ends the group, not the process:

- `shm_held(pids)`: the `/dev/shm` files the processes have open or mapped (from /proc), noted
  before any signal, while the members still hold them;
- `end_group(pgid, grace_s)`: SIGTERM to the group, SIGKILL to what is left after `grace_s`, a wait
  until no member is left (zombies do not count), then the noted segments that still exist are
  removed (nothing else in /dev/shm is touched). A leader that has already exited does not stop
  this: the group lives on in its members.

The segments noted are also written to a file beside the server's log (`NOTED_FILE`), so that
what a killed agent could not remove is removed by the next start on the node (`remove_noted`),
or by whoever stands for the machine's reboot (the drill, after taking its node).

Linux only (/proc); elsewhere the group is signalled and nothing is read or removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SHM_DIR: Final = "/dev/shm"
NOTED_FILE: Final = "server-shm.txt"  # beside the server's log: the segments its processes held
_PROC: Final = Path("/proc")
_WAIT_STEP_S: Final = 0.05
KILL_WAIT_S: Final = 5.0


def members(pgid: int) -> list[int]:
    """Live processes (not zombies) whose process group is `pgid`."""
    out: list[int] = []
    if not (_PROC / "self" / "stat").exists():
        return out
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            out.append(int(entry.name))
    return out


def shm_held(pids: Iterable[int]) -> set[str]:
    """Paths under /dev/shm that the processes have open (fds) or mapped (maps)."""
    prefix = SHM_DIR + "/"
    found: set[str] = set()
    for pid in pids:
        fd_dir = _PROC / str(pid) / "fd"
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(prefix):
                        found.add(target.removesuffix(" (deleted)"))
        with contextlib.suppress(OSError):
            for line in (_PROC / str(pid) / "maps").read_text().splitlines():
                at = line.find(prefix)
                if at >= 0:
                    found.add(line[at:].removesuffix(" (deleted)").strip())
    return {p for p in found if os.path.dirname(p) == SHM_DIR}


@dataclass(frozen=True)
class GroupEnd:
    """What ending a group took: its members, how many needed SIGKILL, the segments removed."""

    members: int
    killed: int
    left: int  # members still alive after the SIGKILL wait (should be 0)
    shm_removed: tuple[str, ...]
    shm_bytes: int


def _signal(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(pgid: int, timeout: float, reap: int | None) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        if reap is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(reap, os.WNOHANG)
        left = members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_WAIT_STEP_S)


def end_group(pgid: int, grace_s: float, *, noted: Iterable[str] = (), leader: int | None = None) -> GroupEnd:
    """End every process of group `pgid` (SIGTERM, SIGKILL after `grace_s`) and remove the shared
    memory they held (`noted`: segments seen earlier, e.g. while the server ran). `leader`, our own
    child, is reaped while waiting so that it does not linger as a zombie."""
    pids = members(pgid)
    shm = shm_held(pids) | set(noted)
    killed = 0
    left: list[int] = []
    if pids:
        _signal(pgid, signal.SIGTERM)
        left = _wait_gone(pgid, grace_s, leader)
        if left:
            killed = len(left)
            _signal(pgid, signal.SIGKILL)
            left = _wait_gone(pgid, KILL_WAIT_S, leader)
    removed: list[str] = []
    size = 0
    if not left:  # a segment of a live process stays: it is still in use
        for path in sorted(shm):
            with contextlib.suppress(OSError):
                size += os.stat(path).st_size
                os.unlink(path)
                removed.append(path)
    return GroupEnd(len(pids), killed, len(left), tuple(removed), size)


def marked(marker: str) -> list[int]:
    """Live processes (not zombies, not this one) whose environment or command line holds `marker`
    (a folder of theirs): what is left of a node or a benchmark run, whatever group it is in."""
    found: list[int] = []
    if not (_PROC / "self" / "stat").exists():
        return found
    needle = marker.encode()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z" and needle in blob:
            found.append(int(entry.name))
    return found


def shm_now() -> set[str]:
    """The segments in /dev/shm now."""
    try:
        return {f"{SHM_DIR}/{name}" for name in os.listdir(SHM_DIR)}
    except OSError:
        return set()


def orphaned_shm(before: set[str]) -> dict[str, int]:
    """Segments that appeared since `before` and that no live process holds: path -> bytes."""
    new = shm_now() - before
    if not new:
        return {}
    held = shm_held(int(p.name) for p in _PROC.iterdir() if p.name.isdigit())
    out: dict[str, int] = {}
    for path in sorted(new - held):
        with contextlib.suppress(OSError):
            out[path] = os.stat(path).st_size
    return out


def write_noted(path: str, segments: Iterable[str]) -> None:
    """Keep the noted segments in `path` (atomically), for `remove_noted` after a kill."""
    tmp = f"{path}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(f"{s}\n" for s in sorted(segments)))
        os.replace(tmp, path)


def remove_noted(path: str) -> list[str]:
    """Remove the segments listed in `path` that still exist and no live process holds; then the
    file. What a server left when its agent was killed before it could end the group."""
    try:
        with open(path, encoding="utf-8") as f:
            listed = {line.strip() for line in f if os.path.dirname(line.strip()) == SHM_DIR}
    except OSError:
        return []
    existing = {p for p in listed if os.path.exists(p)}
    removed: list[str] = []
    if existing:
        held = shm_held(int(p.name) for p in _PROC.iterdir() if p.name.isdigit())
        for segment in sorted(existing - held):
            with contextlib.suppress(OSError):
                os.unlink(segment)
                removed.append(segment)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return removed
