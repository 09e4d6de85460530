"""The drill's controller: it operates one node as a spot provider would, until every episode has a
result or the time limit comes.

- it starts the node through its startup path (spoteval/drill/node.py), with the same agent config
  and store every time;
- it takes the node away after an exponentially distributed lifetime (default mean 45 s), counted
  from the node's start: `notice_s` before the end it sends SIGTERM to the agent's process group
  (the notice), and at the end it freezes and SIGKILLs every process the node started (the node is
  gone, whatever the agent was doing); it then records a `preempted` event, as the provider's
  server-side event capture does;
- it waits a capacity delay (exponential, default mean 5 s) and starts the node again.

Just before each notice the controller freezes the node (SIGSTOP), lists the episodes in flight from
the processes' command lines, delivers the notice and lets the node run on: the tests compare that
list with the attempts the agent recorded as interrupted.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from spoteval import loopback
from spoteval.drill.config import (
    NODE_ID,
    NODE_PLACE,
    DrillConfig,
    DrillError,
    DrillResult,
    Kill,
    agent_config,
    base_workload,
    eval_command,
    harness_plan,
)
from spoteval.drill.display import Display
from spoteval.drill.node import pythonpath
from spoteval.drill.procs import episodes_in, frozen, identifiable, kill_node
from spoteval.loopback import LaunchError, free_port
from spoteval.manifest import ManifestEntry, dump_manifest, parse_manifest
from spoteval.record import Event, RunLayout, format_time, utc_now
from spoteval.store import Store, StoreError

_PREEMPTED_SEQ: Final = 900_000


def start_moto(out: Path) -> loopback.Server:
    """The moto server for `--store s3`, its log in `out/moto.log`."""
    if loopback.moto_command() is None:
        raise DrillError("--store s3 needs the moto server: install it with pip install 'moto[server]'")
    try:
        return loopback.start_moto(workdir=out, log_name="moto.log", die_with_parent=False)
    except LaunchError as exc:
        if exc.exited is not None:
            raise DrillError(f"the moto server exited with {exc.exited} (see {out}/moto.log)") from None
        raise DrillError("the moto server did not answer within 60 s") from None


def create_bucket(moto: loopback.Server, bucket: str) -> None:
    req = urllib.request.Request(f"{moto.url}/{bucket}", method="PUT")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise DrillError(f"creating the drill's bucket failed: HTTP {exc.code}") from None


class Drill:
    """One drill run: set up, operate the node under chaos until every episode has a result."""

    def __init__(self, cfg: DrillConfig, display: Display | None = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.display = display
        self.out = cfg.out.resolve()
        self.moto: loopback.Server | None = None
        self.node: subprocess.Popen[bytes] | None = None
        self.notes: list[str] = []
        self.lifetimes = random.Random(f"lifetimes:{cfg.seed}")
        self.delays = random.Random(f"capacity:{cfg.seed}")
        self.preempted_seq = _PREEMPTED_SEQ

    # set-up ---------------------------------------------------------------------------------

    def _log(self, message: str) -> None:
        if self.display is not None:
            self.display.log(message)

    def _store(self, run_id: str) -> tuple[str, dict[str, Any]]:
        kind = self.cfg.store
        if kind == "file":
            return f"file://{self.out / 'store'}", {}
        if kind == "s3":
            self.moto = start_moto(self.out)
            bucket = f"drill-{run_id.lower()}"[:63].rstrip("-.")
            create_bucket(self.moto, bucket)
            return f"s3://{bucket}/evals", loopback.s3_options(self.moto, "drill")
        return kind, {}

    def _manifest(self) -> list[ManifestEntry]:
        if self.cfg.manifest is not None:
            try:
                return parse_manifest(self.cfg.manifest.read_text(encoding="utf-8"))
            except OSError as exc:
                raise DrillError(f"--manifest {self.cfg.manifest}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise DrillError(f"--manifest {self.cfg.manifest}: {exc}") from None
        if self.cfg.harness is not None:
            shards = harness_plan(self.cfg)
            self._log(f"harness {self.cfg.harness}: {shards.describe()}")
            return list(shards.entries)
        width = max(4, len(str(self.cfg.episodes)))
        return [ManifestEntry(f"ep-{i:0{width}d}", {"index": i}) for i in range(1, self.cfg.episodes + 1)]

    def _agent_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "spoteval.agent", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": pythonpath()},
            check=False,
        )

    # the provider ---------------------------------------------------------------------------

    def _launch(self, config: Path, incarnation: int) -> subprocess.Popen[bytes]:
        logs = self.out / "node" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = open(logs / f"node-{incarnation}.log", "wb")  # noqa: SIM115 - the child holds it
        try:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "spoteval.drill",
                    "node",
                    "--config",
                    str(config),
                    "--boot-file",
                    str(self.out / "node" / "boot.json"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": pythonpath()},
            )
        finally:
            log.close()

    def _write_preempted(self, store: Store, layout: RunLayout, at: datetime, launched: datetime) -> None:
        event = Event(
            time=at,
            run_id=layout.run_id,
            node=NODE_ID,
            kind="preempted",
            reason="provider",
            **NODE_PLACE,
            details={"observer": "drill", "launch_time": format_time(launched)},
        )
        self.preempted_seq += 1
        store.put_new(layout.event(at, NODE_ID, self.preempted_seq), event.dumps())

    def _count_results(self, store: Store, layout: RunLayout) -> int:
        try:
            return len(store.list(layout.results_prefix))
        except StoreError:
            return -1

    def run(self) -> DrillResult:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        started = utc_now()
        run_id = cfg.run_id or f"drill-{started.strftime('%Y%m%d-%H%M%S')}-s{cfg.seed}"
        try:
            store_url, options = self._store(run_id)
            return self._run(run_id, store_url, options, started)
        finally:
            self._stop_node()

    def _stop_node(self) -> None:
        if self.node is not None and self.node.poll() is None:
            kill_node(self.node.pid)
            self.node.wait(timeout=30)

    def close(self) -> None:
        """End whatever still runs: the node, and the moto server (the record goes with it)."""
        self._stop_node()
        if self.moto is not None:
            self.moto.stop()
            self.moto = None

    def _run(self, run_id: str, store_url: str, options: dict[str, Any], started: datetime) -> DrillResult:
        cfg = self.cfg
        try:
            store = Store(store_url, options)
        except StoreError as exc:
            raise DrillError(str(exc)) from None
        layout = RunLayout(run_id)
        entries = self._manifest()
        if self.display is not None:
            self.display.set_total(len(entries))
        manifest_path = self.out / "manifest.jsonl"
        manifest_path.write_bytes(dump_manifest(entries))
        config_path = self.out / "agent.json"
        config_path.write_text(
            json.dumps(agent_config(cfg, run_id, store_url, options, free_port()), indent=2) + "\n"
        )
        base = base_workload(len(entries), cfg.capacity_delay_s)
        (self.out / "workload.json").write_text(json.dumps(base, indent=2) + "\n")
        upload = self._agent_cli("manifest", "--config", str(config_path), str(manifest_path))
        if upload.returncode != 0:
            raise DrillError(f"uploading the manifest failed: {_last_line(upload.stderr)}")
        self._log(
            f"run {run_id}: {len(entries)} episodes, concurrency {cfg.concurrency}, store {store_url}; "
            f"lifetimes exponential with mean {cfg.lifetime_s:g} s, notice {cfg.notice_s:g} s, "
            f"capacity delay mean {cfg.capacity_delay_s:g} s, seed {cfg.seed}"
        )
        life = _Life(
            store, layout, config_path, frozenset(e.id for e in entries), time.monotonic() + cfg.timeout_s
        )
        kills: list[Kill] = []
        exit_codes: list[int | None] = []
        incarnation = 0
        early = 0  # node starts in a row whose agent exited by itself before the run was done
        finished = False
        while time.monotonic() < life.deadline:
            incarnation += 1
            outcome, code, kill = self._one_life(life, incarnation, len(kills))
            exit_codes.append(code)
            if kill is not None:
                early = 0
                kills.append(kill)
                self._log(f"node taken (preempted); capacity comes back in {kill.capacity_delay_s:.1f} s")
                self._wait(
                    min(time.monotonic() + kill.capacity_delay_s, life.deadline),
                    life,
                    incarnation,
                    len(kills),
                )
                continue
            if outcome == "done":
                finished = True
                self._log(f"node stopped by itself (exit {code}): every episode has its result")
                break
            if outcome == "timeout":
                self.notes.append(
                    f"stopped at the time limit of {cfg.timeout_s:g} s before every episode had a result"
                )
                self._log(self.notes[-1])
                break
            tail = _tail(self.out / "node" / "logs" / f"node-{incarnation}.log")
            early += 1
            if code == 2 or early == 3:  # a config the agent refuses, or an agent that keeps stopping
                raise DrillError(f"the agent exited with {code} before the run was done: {tail}")
            self.notes.append(
                f"node start {incarnation}: the agent exited with {code} before the run was done"
            )
            self._log(f"{self.notes[-1]}: {tail}")
        result = DrillResult(
            config=cfg,
            run_id=run_id,
            store_url=store_url,
            store_options=options,
            started=started,
            ended=utc_now(),
            incarnations=incarnation,
            kills=tuple(kills),
            finished=finished,
            episodes=len(entries),
            results=max(0, self._count_results(store, layout)),
            exit_codes=tuple(exit_codes),
            notes=tuple(self.notes),
        )
        (self.out / "drill.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
        return result

    def _one_life(self, life: _Life, incarnation: int, kills: int) -> tuple[str, int | None, Kill | None]:
        """Start the node and run it until it is taken ("taken"), ends by itself ("done", "exited"),
        or the drill's time runs out ("timeout")."""
        cfg = self.cfg
        lifetime = self.lifetimes.expovariate(1.0 / cfg.lifetime_s)
        launched = utc_now()
        t_launch = time.monotonic()
        self.node = node = self._launch(life.config, incarnation)
        self._log(f"node start {incarnation} (its lifetime will be {lifetime:.1f} s)")
        t_notice = t_launch + max(0.0, lifetime - cfg.notice_s) if cfg.notice_s > 0 else math.inf
        t_kill = t_launch + lifetime
        notice_at: datetime | None = None
        in_flight: set[str] = set()
        done_at: float | None = None
        while True:
            now = time.monotonic()
            done = self._count_results(life.store, life.layout)
            self._status(done, len(life.ids), incarnation, kills, "notice sent" if notice_at else "running")
            all_done = done >= len(life.ids)
            exited = node.poll() is not None
            if exited and (notice_at is None or all_done):
                return ("done" if all_done else "exited"), node.returncode, None
            if all_done:
                done_at = done_at or now
                if now - done_at > 30:  # the agent should stop by itself once there is no work left
                    self.notes.append("the agent did not exit within 30 s of the last result; node killed")
                    kill_node(node.pid)
                    node.wait(timeout=30)
                    return "done", None, None
            if now >= life.deadline:
                kill_node(node.pid)
                node.wait(timeout=30)
                return "timeout", None, None
            if notice_at is None and now >= t_notice and not exited and not all_done:
                with frozen(node.pid, settle=True) as procs:
                    # counted again with the node frozen: a node that has just finished gets no notice
                    if self._count_results(life.store, life.layout) < len(life.ids):
                        in_flight = episodes_in(procs, life.ids)
                        notice_at = utc_now()
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(node.pid, signal.SIGTERM)
                if notice_at is not None:
                    self._log(f"notice (SIGTERM to the agent) with {len(in_flight)} episode(s) in flight")
            if now >= t_kill:
                break
            time.sleep(0.05)
        code = node.returncode
        if node.poll() is None:
            if notice_at is None:  # taken without notice: what was in flight dies now
                with frozen(node.pid, settle=True) as procs:
                    in_flight = episodes_in(procs, life.ids)
            kill_node(node.pid)
            node.wait(timeout=30)
        killed_at = utc_now()
        self._write_preempted(life.store, life.layout, killed_at, launched)
        kill = Kill(
            incarnation=incarnation,
            launched=launched,
            lifetime_s=lifetime,
            notice_at=notice_at,
            killed_at=killed_at,
            in_flight=tuple(sorted(in_flight)),
            observed=identifiable(eval_command(cfg)),
            agent_exit=code,
            capacity_delay_s=self.delays.expovariate(1.0 / cfg.capacity_delay_s),
        )
        return "taken", code, kill

    def _status(self, done: int, total: int, incarnation: int, kills: int, phase: str) -> None:
        if self.display is not None:
            self.display.update(
                max(0, done),
                f"node start {incarnation}: {phase}; interruptions {kills}; restarts {incarnation - 1}",
            )

    def _wait(self, until: float, life: _Life, incarnation: int, kills: int) -> None:
        while time.monotonic() < until:
            done = self._count_results(life.store, life.layout)
            self._status(done, len(life.ids), incarnation, kills, "waiting for capacity")
            time.sleep(min(0.2, max(0.0, until - time.monotonic())))


@dataclass(frozen=True)
class _Life:
    store: Store
    layout: RunLayout
    config: Path
    ids: frozenset[str]
    deadline: float


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _tail(path: Path) -> str:
    try:
        return _last_line(path.read_text(errors="replace"))
    except OSError:
        return "no log"


def run_drill(cfg: DrillConfig, display: Display | None = None) -> DrillResult:
    """Run a drill and end everything it started (with `--store s3` the record ends with it)."""
    d = Drill(cfg, display)
    try:
        return d.run()
    finally:
        d.close()
