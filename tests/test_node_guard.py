"""tests/node_guard.py: the guard of a drill test's nodes is not itself one of them, finds the
processes they started that carry no mark of the drill's folder (as vLLM's renamed engine), ends
all of them when it ends, and notes the shared memory they held."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spoteval.agent.procgroup import SHM_DIR, marked
from tests.node_guard import NOTE_EVERY_S, NodeGuard

pytestmark = pytest.mark.timing

#: a stand-in node (its command line holds the drill's folder, argv[1]): starts an engine that
#: carries no mark of the folder (another session, an empty environment, a command line of its
#: own), which maps a shared-memory segment; prints the engine's pid and waits to be ended
_NODE = """
import subprocess, sys, time
engine = subprocess.Popen(
    [sys.executable, "-c", sys.argv[3], sys.argv[2]], env={}, start_new_session=True,
    stdout=subprocess.PIPE,
)
assert engine.stdout.readline() == b"mapped\\n"
print(engine.pid, flush=True)
time.sleep(3600)
"""
_ENGINE = """
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, mmap.PAGESIZE)
held = mmap.mmap(fd, mmap.PAGESIZE)
print("mapped", flush=True)
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
    try:
        with NodeGuard(folder).active() as guard:
            node = subprocess.Popen(
                [sys.executable, "-c", _NODE, str(folder.resolve()), segment, _ENGINE],
                stdout=subprocess.PIPE,
                start_new_session=True,  # as the drill starts a node: out of pytest's reach
            )
            assert node.stdout is not None
            engine = int(node.stdout.readline())
            assert marked(str(folder.resolve())) == [node.pid]  # the watchdog is not one of them
            _wait_noted(guard, segment)
            assert guard.left() == sorted([node.pid, engine])
        assert node.wait(timeout=30) == -9  # ended by the watchdog once the guard ended
        deadline = time.monotonic() + 30
        while guard.left():  # the engine, an orphan now, too
            assert time.monotonic() < deadline, guard.left()
            time.sleep(0.1)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment)  # a SIGKILLed process leaves its segment: the drill's stop removes them
