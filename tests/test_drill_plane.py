"""The drill's local control plane: a start publishes its number and launch time together, and holds
the plane's lock only while it launches (the chaos controller reads it without waiting for a boot)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from spoteval.drill.plane import LocalPlane
from spoteval.record import utc_now
from tests.fake_metadata import wait_for

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def test_a_start_publishes_its_number_and_launch_time_together_and_boots_without_the_lock(
    tmp_path: Path,
) -> None:
    boot = tmp_path / "boot.json"
    launching, proceed = threading.Event(), threading.Event()

    def launch(number: int) -> subprocess.Popen[bytes]:
        launching.set()
        assert proceed.wait(60)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    plane = LocalPlane(launch, node="n1", boot_file=boot)
    before = utc_now()
    starting = threading.Thread(target=plane.start, args=(120.0,), daemon=True)
    starting.start()
    try:
        assert launching.wait(60)
        assert (plane.latest, plane.starts, plane.launched) == (None, 0, None)  # nothing half-published
        proceed.set()
        assert wait_for(lambda: plane.latest is not None, 60)
        latest = plane.latest
        assert latest is not None and latest.number == plane.starts == 1
        assert plane.launched == latest.at and before <= latest.at <= utc_now()
        # the start now waits for the node's boot file, without the lock: the controller's reads
        # and the operator's other calls go on meanwhile
        assert plane.lock.acquire(timeout=60)
        plane.lock.release()
        assert starting.is_alive() and plane.state().running
        boot.write_text("{}")  # the node notes its boot: the start returns
        starting.join(60)
        assert not starting.is_alive()
    finally:
        proceed.set()
        plane.stop(30.0)
    assert plane.state().raw == "stopped" and plane.latest is latest
