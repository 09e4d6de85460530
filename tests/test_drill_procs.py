"""The drill's provider ends a node: every process of it is gone when `kill_node` returns, even one
that was forking at that moment (a startup path launching its agent, an agent its episodes)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from spoteval.drill.procs import descendants, kill_node, processes

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)

# a node whose processes never stop forking: each child starts another child, each keeps it
FORKER = """
import subprocess, sys, time
tag = sys.argv[1]
kids = []
while True:
    kids.append(subprocess.Popen([sys.executable, "-c", FORK_AGAIN, tag]))
    time.sleep(0.01)
"""


def _tagged(tag: str) -> list[int]:
    return [p.pid for p in processes() if tag in p.argv]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_node_killed_while_it_forks_leaves_no_process_behind() -> None:
    for _ in range(5):  # a fork in progress at the kill, several times over
        tag = f"spoteval-forker-{uuid.uuid4().hex}"
        again = (
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]]); "
            "time.sleep(120)"
        )
        code = FORKER.replace("FORK_AGAIN", repr(again))
        root = subprocess.Popen([sys.executable, "-c", code, tag], start_new_session=True)
        try:
            until = time.monotonic() + 120
            while len(descendants(root.pid)) < 4 and time.monotonic() < until:
                time.sleep(0.01)
            assert len(descendants(root.pid)) >= 4  # the node is forking
            kill_node(root.pid)
            root.wait(30)
            assert _tagged(tag) == []  # nothing of the node runs on, none was started after the kill
        finally:
            for pid in _tagged(tag):
                subprocess.run(["kill", "-9", str(pid)], check=False)
            if root.poll() is None:
                root.kill()
