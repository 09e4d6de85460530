"""The drill's operator under the run's lease: a second drill operator started by hand
(`python -m spoteval.drill operator DIR`) only reads while the drill runs, exits at once once the
drill finished, and takes over the nodes of a drill that was killed, once the drill's lease expired.

The episodes wait for a gate file the test creates, so the drill cannot finish before the test has
looked; no assertion depends on how fast the machine is."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from spoteval import drill
from spoteval.drill.__main__ import main as drill_main
from spoteval.drill.attach import OPERATOR_FILE, DrillRun
from spoteval.drill.node import init_file
from spoteval.operate.lease import read_objects
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import wait_for

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def gated(gate: Path) -> tuple[str, ...]:
    """An episode that finishes once `gate` exists."""
    script = f'while [ ! -e "{gate}" ]; do sleep 0.05; done; echo "{{\\"ok\\": true}}" > "$1"'
    return ("sh", "-c", script, "episode", "{output}", "{episode_id}")


def config(out: Path, gate: Path, **extra: Any) -> drill.DrillConfig:
    return drill.DrillConfig(
        out=out,
        episodes=6,
        concurrency=3,
        lifetime_s=3600.0,  # no chaos while the test looks: the node lives until the run is done
        eval_command=gated(gate),
        heartbeat_s=1.0,
        server_startup_s=0.2,
        timeout_s=120.0,
        **extra,
    )


def lease_objects(out: Path) -> list[dict[str, Any]]:
    run = DrillRun.read(out)
    return read_objects(Store(run.store_url, run.store_options), run.run_id)


def test_a_second_drill_operator_only_reads_while_the_drill_runs_and_exits_once_it_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, gate = tmp_path / "drill", tmp_path / "gate"
    runner = drill.Drill(config(out, gate))
    result: list[drill.DrillResult] = []
    thread = threading.Thread(target=lambda: result.append(runner.run()), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: (out / OPERATOR_FILE).exists() and bool(lease_objects(out)), timeout=120)
        held = lease_objects(out)
        assert drill_main(["operator", str(out), "--once"]) == 0
        [said] = capsys.readouterr().out.splitlines()
        assert said.startswith(f"run {DrillRun.read(out).run_id}: operator drill-")
        assert said.endswith("this one only reads")
        assert {o["holder"] for o in lease_objects(out)} == {held[0]["holder"]}  # the reader wrote nothing
    finally:
        gate.touch()
        thread.join(timeout=180)
    assert result and result[0].finished and result[0].results == 6
    last = lease_objects(out)[-1]
    assert (last["holder"], last["end"]) == (held[0]["holder"], "finished")
    assert drill_main(["operator", str(out), "--once"]) == 0
    [said] = capsys.readouterr().out.splitlines()
    assert said.endswith("nothing to operate") and " is finished: " in said
    assert lease_objects(out)[-1] == last


DRILL = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from tests.test_drill_operator import config
from spoteval import drill
drill.Drill(config(Path({out!r}), Path({gate!r}), lease_ttl_s=3.0)).run()
"""


def test_a_killed_drills_nodes_are_operated_by_the_next_drill_operator_to_the_end(tmp_path: Path) -> None:
    out, gate = tmp_path / "drill", tmp_path / "gate"
    env = {**os.environ, "PYTHONPATH": str(servers.REPO)}
    code = DRILL.format(repo=str(servers.REPO), out=str(out), gate=str(gate))
    first = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=servers.REPO)
    second: subprocess.Popen[str] | None = None
    try:
        boot = out / "node" / "boot.json"
        assert wait_for(lambda: init_file(boot).exists() and bool(lease_objects(out)), timeout=120)
        first.send_signal(signal.SIGKILL)  # the drill dies; its node runs on in its own session
        first.wait(timeout=60)
        drills = lease_objects(out)
        assert all(o["end"] is None for o in drills)
        second = subprocess.Popen(
            [sys.executable, "-m", "spoteval.drill", "operator", str(out)],
            env=env,
            cwd=servers.REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert wait_for(lambda: len(lease_objects(out)) > len(drills), timeout=120)
        gate.touch()  # the episodes finish; the agent exits when the run is done, and the node with it
        said, _ = second.communicate(timeout=180)
        assert second.returncode == 0, said
    finally:
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
        with contextlib.suppress(OSError, ValueError, KeyError):  # the node, if the test failed early
            os.killpg(json.loads(init_file(out / "node" / "boot.json").read_text())["pid"], signal.SIGKILL)
    objects = lease_objects(out)
    took = objects[len(drills)]
    assert took["holder"].startswith("drill-operator-") and took["took_over"]["holder"] == drills[0]["holder"]
    assert took["took_over"]["reason"] == "expired"
    assert f"took the operator lease from {drills[0]['holder']} (expired" in said
    assert (objects[-1]["holder"], objects[-1]["end"]) == (took["holder"], "finished")
    run = DrillRun.read(out)
    results = Store(run.store_url, run.store_options).list(f"runs/{run.run_id}/results/")
    assert len(results) == 6
