"""Powering the node off when the run is done (`stop_rules.on_done: poweroff`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence


def power_off(command: Sequence[str], log: Callable[[str], None]) -> bool:
    """Run the power-off command (and `shutdown -h now` after a failed `systemctl poweroff`);
    True once one of them exits 0. Each failure is logged."""
    commands = [list(command)]
    if tuple(commands[0]) == ("systemctl", "poweroff"):
        commands.append(["shutdown", "-h", "now"])
    for argv in commands:
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            continue
        try:
            done = subprocess.run(argv, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"power off with {' '.join(argv)} failed: {exc}")
            continue
        if done.returncode == 0:
            log(f"powering off ({' '.join(argv)})")
            return True
        log(f"power off with {' '.join(argv)} exited with {done.returncode}")
    log("could not power off: no power-off command worked")
    return False
