"""The node's processes as the controller sees them: list them, freeze them (SIGSTOP) while it looks,
kill them all, and tell which episodes were in flight from their command lines.

A signal takes effect when its target next runs, which on a loaded machine can be a while after
`kill()` returns: a process signalled SIGSTOP may still finish a fork, and one signalled SIGKILL may
still hold its sockets (a model server's port). So a freeze waits until each process it stopped is
stopped (its state in /proc), before it looks for children; a kill signals every process while the
node is frozen (a process let go before its kill could start a child that outlives it), and waits
until each has exited (on systems without /proc, neither wait is possible, and neither is made).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    argv: tuple[str, ...]


def processes() -> list[Proc]:
    """Every process the OS shows (/proc on Linux, `ps` elsewhere)."""
    out: list[Proc] = []
    proc = Path("/proc")
    if proc.is_dir() and Path("/proc/self/stat").exists():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # the command name may hold spaces and parentheses: the fields follow the last ')'
            fields = stat[stat.rindex(")") + 2 :].split()
            out.append(
                Proc(int(entry.name), int(fields[1]), tuple(a.decode(errors="replace") for a in argv if a))
            )
        return out
    text = subprocess.run(
        ["ps", "-A", "-ww", "-o", "pid=", "-o", "ppid=", "-o", "args="],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            out.append(Proc(int(parts[0]), int(parts[1]), tuple(parts[2].split()) if len(parts) > 2 else ()))
    return out


def started(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, /proc), or None if it is gone or a
    zombie: with its pid, what tells a process from a later one that reuses the number."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (the state) on
    return None if fields[0] == "Z" else int(fields[19])  # field 22: starttime


def descendants(root: int, table: Sequence[Proc] | None = None) -> list[Proc]:
    """The processes below `root` (children, their children, ...)."""
    table = processes() if table is None else table
    children: dict[int, list[Proc]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p)
    out: list[Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return out


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


STOPPED: Final = frozenset("tT")  # /proc states: stopped by a signal, or traced
EXITED: Final = frozenset("ZX")  # exited: a zombie (its memory and files released), or dead
SIGNAL_WAIT_S: Final = 10.0  # the longest wait for a signal to take effect (a process stuck in the kernel)


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, D, T, Z, ...); None when it is gone or unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2 :]
    return rest[:1] or None


def _await_state(pids: Sequence[int], states: frozenset[str]) -> None:
    """Wait until every process is in one of `states`, has exited, or is gone (at most SIGNAL_WAIT_S)."""
    until = time.monotonic() + SIGNAL_WAIT_S
    waiting = list(pids)
    while waiting and time.monotonic() < until:
        waiting = [pid for pid in waiting if (s := _state(pid)) is not None and s not in states | EXITED]
        if waiting:
            time.sleep(0.001)


def _freeze(root: int) -> list[int]:
    """SIGSTOP `root` and every process below it, until no new one appears: each round waits until
    what it stopped is stopped, so that a fork in progress has finished and its child is found."""
    stopped: list[int] = [root]
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, signal.SIGSTOP)
    _await_state([root], STOPPED)
    for _ in range(20):
        fresh = [p.pid for p in descendants(root) if p.pid not in stopped]
        if not fresh:
            break
        _signal_all(fresh, signal.SIGSTOP)
        _await_state(fresh, STOPPED)
        stopped.extend(fresh)
    return stopped


def _mid_fork(procs: Sequence[Proc]) -> bool:
    """A child caught between fork and exec still shows its parent's command line."""
    argv = {p.pid: p.argv for p in procs}
    return any(p.ppid in argv and argv[p.ppid] == p.argv for p in procs)


@contextlib.contextmanager
def frozen(root: int, *, settle: bool = False) -> Iterator[list[Proc]]:
    """Stop every process of the node (SIGSTOP) while the caller looks at it, then let them go on.

    With `settle`, a freeze that caught a process between fork and exec is released and retried
    (for a few milliseconds at most), so that the command lines it yields are the real ones.
    """
    for attempt in range(50):
        stopped = _freeze(root)
        procs = [p for p in descendants(root) if p.pid in stopped]
        if not settle or not _mid_fork(procs) or attempt == 49:
            break
        _signal_all(stopped, signal.SIGCONT)
        time.sleep(0.002)
    try:
        yield procs
    finally:
        _signal_all(stopped, signal.SIGCONT)


def kill_node(root: int) -> None:
    """The node is gone: freeze `root` and every process below it, SIGKILL them all while they are
    stopped (none can fork again: a stopped process that is killed never runs its own code again),
    and return once each of them has exited (nothing of the node holds a port or a file then)."""
    with frozen(root) as procs:
        pids = [root, *(p.pid for p in procs)]
        _signal_all(pids, signal.SIGKILL)
    _await_state(pids, EXITED)


def episodes_in(procs: Sequence[Proc], ids: frozenset[str]) -> set[str]:
    """Episode ids that appear as a whole argument (or `--x=ID`) of a process's command line."""
    found: set[str] = set()
    for p in procs:
        for arg in p.argv:
            if arg in ids:
                found.add(arg)
            elif "=" in arg and arg.rsplit("=", 1)[1] in ids:
                found.add(arg.rsplit("=", 1)[1])
    return found


def identifiable(command: Sequence[str]) -> bool:
    """Whether episodes in flight can be told from their command lines: `{episode_id}` is a whole
    argument (or `--name={episode_id}`) of the episode command."""
    return any(a == "{episode_id}" or a.endswith("={episode_id}") for a in command)
