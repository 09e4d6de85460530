"""The model server's whole process group ends with the agent's stop, with its shared memory: also
when the server itself was SIGKILLed and left its children running (vLLM's engine core and worker
live on as orphans then). Real processes, a real segment in /dev/shm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spoteval.agent.config import ServerConfig
from spoteval.agent.episodes import ModelServer
from spoteval.agent.procgroup import end_group, members

pytestmark = [
    pytest.mark.timing,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /proc and /dev/shm (Linux)"),
]

#: a "server" that creates a shared memory segment, starts a child that maps it (same group, as an
#: engine process is), writes the child's pid to a file, and waits
SERVER = r"""
import mmap, os, subprocess, sys, time
name, pid_file = sys.argv[1], sys.argv[2]
fd = os.open("/dev/shm/" + name, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 1 << 20)
child = subprocess.Popen([sys.executable, "-c",
    "import mmap, os, sys, time\n"
    "fd = os.open('/dev/shm/' + sys.argv[1], os.O_RDWR)\n"
    "m = mmap.mmap(fd, 1 << 20)\n"
    "os.close(fd)\n"
    "open(sys.argv[2], 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n", name, pid_file])
os.close(fd)
time.sleep(600)
"""


def start_server(tmp_path: Path) -> tuple[ModelServer, str, Path]:
    name = f"spoteval-test-{uuid.uuid4().hex[:12]}"
    pid_file = tmp_path / "child.pid"
    config = ServerConfig(
        url="http://127.0.0.1:9", command=(sys.executable, "-c", SERVER, name, str(pid_file))
    )
    server = ModelServer(config, str(tmp_path / "server.log"), os.environ)
    server.start()
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the test server's child did not start"
        time.sleep(0.05)
    return server, name, pid_file


def test_stop_ends_the_group_and_removes_its_shared_memory(tmp_path: Path) -> None:
    server, name, _ = start_server(tmp_path)
    assert server.proc is not None
    assert len(members(server.proc.pid)) == 2
    end = server.stop(grace_s=5.0)
    assert end is not None
    assert (end.members, end.killed, end.left) == (2, 0, 0)
    assert end.shm_removed == (f"/dev/shm/{name}",)
    assert end.shm_bytes == 1 << 20
    assert not Path(f"/dev/shm/{name}").exists()
    assert members(server.proc.pid) == []


def test_a_sigkilled_server_leaves_nothing_once_the_agent_stops_it(tmp_path: Path) -> None:
    server, name, pid_file = start_server(tmp_path)
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGKILL)  # the server alone: its child lives on, orphaned
    server.proc.wait(timeout=10)
    child = int(pid_file.read_text())
    assert members(server.proc.pid) == [child]
    assert Path(f"/dev/shm/{name}").exists()
    end = server.stop(grace_s=5.0)
    assert end is not None
    assert (end.members, end.left) == (1, 0)
    assert end.shm_removed == (f"/dev/shm/{name}",)
    assert members(server.proc.pid) == []
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for whoever adopted it does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def test_a_member_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    end = end_group(proc.pid, 0.5, leader=proc.pid)
    assert (end.members, end.killed, end.left) == (1, 1, 0)
    assert members(proc.pid) == []  # reaped by end_group (its leader)


def test_what_a_killed_agent_noted_is_removed_by_the_next_start(tmp_path: Path) -> None:
    """The agent was SIGKILLed with its server (and the server's resource tracker): the segments it
    had noted are removed when the server starts next on the node; one a live process holds stays."""
    server, name, pid_file = start_server(tmp_path)
    assert server.proc is not None
    server.note_shm()
    noted = Path(server.noted_path)
    assert noted.read_text() == f"/dev/shm/{name}\n"
    child = int(pid_file.read_text())
    os.killpg(server.proc.pid, signal.SIGKILL)  # the whole node's processes, as a kill does
    server.proc.wait(timeout=10)
    assert wait_gone(child)
    assert Path(f"/dev/shm/{name}").exists()  # left behind: nobody removed it
    (tmp_path / "other").mkdir()
    held, keeper = start_server(tmp_path / "other")[:2]  # another server's segment, still in use
    noted.write_text(f"/dev/shm/{name}\n/dev/shm/{keeper}\n/etc/passwd\n")
    sleeper = ServerConfig(
        url="http://127.0.0.1:9", command=(sys.executable, "-c", "import time; time.sleep(60)")
    )
    again = ModelServer(sleeper, server.log_path, os.environ)
    again.start()
    try:
        assert again.left_behind == [f"/dev/shm/{name}"]
        assert not Path(f"/dev/shm/{name}").exists()
        assert Path(f"/dev/shm/{keeper}").exists() and Path("/etc/passwd").exists()
        assert not noted.exists()
    finally:
        again.stop(grace_s=5.0)
        held.stop(grace_s=5.0)


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
