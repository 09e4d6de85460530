"""tests/node_guard.py: the guard of a drill test's nodes is not itself one of them, ends what is
left of them when it ends, and notes the shared memory they held."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from spoteval.agent.procgroup import SHM_DIR, marked
from tests.node_guard import NOTE_EVERY_S, NodeGuard

#: a stand-in node: maps a shared-memory segment of its own, says so, and waits to be ended
_NODE = """
import mmap, os, sys, time
path = sys.argv[2]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, mmap.PAGESIZE)
held = mmap.mmap(fd, mmap.PAGESIZE)
print("up", flush=True)
time.sleep(3600)
"""


def _wait_noted(guard: NodeGuard, path: str) -> None:
    deadline = time.monotonic() + 60
    while path not in guard.seen:
        assert time.monotonic() < deadline, f"{path} never noted"
        time.sleep(NOTE_EVERY_S / 4)


def test_the_guard_finds_only_the_nodes_and_ends_them(tmp_path: Path) -> None:
    folder = tmp_path / "drill"
    folder.mkdir()
    segment = f"{SHM_DIR}/spoteval-guard-test-{os.getpid()}"
    with NodeGuard(folder).active() as guard:
        node = subprocess.Popen(
            [sys.executable, "-c", _NODE, str(folder.resolve()), segment],
            stdout=subprocess.PIPE,
            start_new_session=True,  # as the drill starts a node: out of pytest's reach
        )
        assert node.stdout is not None and node.stdout.readline() == b"up\n"
        assert marked(str(folder.resolve())) == [node.pid]  # the watchdog is not one of them
        _wait_noted(guard, segment)
    assert node.wait(timeout=30) == -9  # ended by the watchdog once the guard ended
    assert marked(str(folder.resolve())) == []
    os.unlink(segment)  # a SIGKILLed process leaves its segment: the drill's own stop removes them
