"""The drill's controller: the local node under chaos, brought back by the real operator.

- the node is a control plane like a cloud's (spoteval/drill/plane.py): its start launches the node's
  startup path (spoteval/drill/node.py) with the same agent config and store every time;
- the chaos takes the node away after an exponentially distributed lifetime (default mean 45 s),
  counted from the node's start: `notice_s` before the end it sends SIGTERM to the agent's process
  group (the notice), and at the end it freezes and SIGKILLs every process the node started (the node
  is gone, whatever the agent was doing); it then records a `preempted` event, as the provider's
  server-side event capture does, and holds the capacity back for a delay (exponential, default mean
  5 s): a start before then fails with "no capacity", as a provider's does;
- with `preempt_after_samples` (harness drills) the node's first life ends instead once that many
  harness samples are in the store: the notice then, the kill `notice_s` later; likewise with
  `preempt_after_results` once that many episode results are;
- the operator (spoteval.operate, the same code that runs against a cloud) checks the node every half
  second: it waits for capacity with backoff, reads the price, checks the grant (spot never above the
  on-demand price), starts the node again and records the start (`restart_after_preemption`). It runs
  under the run's operator lease, as every operator does, and the drill writes `operator.json` into
  its folder, so a second operator started by hand (`python -m spoteval.drill operator DIR`,
  spoteval/drill/attach.py) only reads while the drill's holds the lease, and takes over if the drill
  is killed.

Just before each notice the controller freezes the node (SIGSTOP), lists the episodes in flight from
the processes' command lines, delivers the notice and lets the node run on: the tests compare that
list with the attempts the agent recorded as interrupted. The provider's side of this (lifetimes,
notices, kills, capacity delays) is spoteval/drill/chaos.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spoteval import loopback
from spoteval.bundle.unpack import unpack
from spoteval.drill.attach import DrillNode, DrillRun, write_operator_file
from spoteval.drill.bundled import DrillBundle, prepare
from spoteval.drill.chaos import DrilledRun, NodeLife, Provider, node_name, release_file
from spoteval.drill.config import (
    DRILL_GRANT,
    OPERATOR_TIMING,
    DrillConfig,
    DrillError,
    DrillResult,
    Kill,
    agent_config,
    base_workload,
    node_dir,
    node_id,
)
from spoteval.drill.display import Display
from spoteval.drill.moto_store import create_bucket, start_moto
from spoteval.drill.node import launch_node
from spoteval.drill.plane import LocalPlane, local_outputs
from spoteval.harness.hold import ENV as HOLD_ENV
from spoteval.harness.hold import RELEASE_ENV
from spoteval.loopback import free_port
from spoteval.manifest import ManifestEntry, dump_manifest
from spoteval.operate.lease import OperatorLease, holder_name
from spoteval.operate.loop import Line, Operator
from spoteval.record import RunLayout, utc_now
from spoteval.store import Store, StoreError


class Drill:
    """One drill run: set up, operate the node under chaos until every episode has a result."""

    def __init__(self, cfg: DrillConfig, display: Display | None = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.display = display
        self.out = cfg.out.resolve()
        self.moto: loopback.Server | None = None
        self.planes: list[LocalPlane] = []
        self.notes: list[str] = []
        self.kills: list[Kill] = []  # each time the provider took a node
        self.exit_codes: list[int | None] = []  # each agent's exit code, as its node ended
        self.provider = Provider(cfg, self.planes, (), self._log)
        self.prepared: DrillBundle | None = None  # the bundle every node start unpacks

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
        assert self.prepared is not None
        if self.prepared.statement is not None:
            self._log(self.prepared.statement)
        return self.prepared.entries

    @property
    def bundle_zip(self) -> Path:
        return self.out / "agent-bundle.zip"

    def _agent_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The agent's CLI as the node runs it: from the bundle (unpacked into `out/bundle/`)."""
        root = unpack(self.bundle_zip, self.out / "bundle")
        return subprocess.run(
            [sys.executable, "-m", "spoteval.agent", *args],
            capture_output=True,
            text=True,
            cwd=self.out,
            env={**os.environ, "PYTHONPATH": str(root)},
            check=False,
        )

    def _write_configs(self, run_id: str, store_url: str, options: dict[str, Any]) -> list[Path]:
        """Each node's agent config (`agent.json`, in a pool `agent-{i}.json` for the others)."""
        cfg = self.cfg
        configs = [self.out / "agent.json"] + [self.out / f"agent-{i}.json" for i in range(2, cfg.nodes + 1)]
        prepared = self.prepared
        assert prepared is not None
        for i, path in enumerate(configs, start=1):
            agent = agent_config(
                cfg,
                run_id,
                store_url,
                options,
                free_port(),
                index=i,
                episodes_command=prepared.command,
                eval_env=prepared.eval_env,
                home=prepared.base,
            )
            path.write_text(json.dumps(agent, indent=2) + "\n")
        return configs

    def _upload_manifest(self, entries: list[ManifestEntry], config: Path) -> None:
        manifest_path = self.out / "manifest.jsonl"
        manifest_path.write_bytes(dump_manifest(entries))
        upload = self._agent_cli("manifest", "--config", str(config), str(manifest_path))
        if upload.returncode != 0:
            raise DrillError(f"uploading the manifest failed: {_last_line(upload.stderr)}")

    # the provider ---------------------------------------------------------------------------

    def _launch(self, config: Path, incarnation: int, index: int = 1) -> subprocess.Popen[bytes]:
        hold: dict[str, str] = {}
        if self.cfg.preempt_after_samples is not None and incarnation == 1:
            hold[HOLD_ENV] = str(self.cfg.preempt_after_samples)  # a first life's shards stop at N samples
            hold[RELEASE_ENV] = str(release_file(self.cfg, index))
            release_file(self.cfg, index).unlink(missing_ok=True)
        folder = node_dir(self.cfg, index)
        return launch_node(config, folder, f"node-{incarnation}.log", bundle=self.bundle_zip, extra_env=hold)

    def _make_planes(self, configs: list[Path]) -> None:
        """A control plane per node, each launching the node's startup path with its config."""
        cfg = self.cfg
        self.planes[:] = [
            LocalPlane(
                lambda n, i=i, c=c: self._launch(c, n, i),  # type: ignore[misc]
                node=node_id(cfg, i),
                boot_file=node_dir(cfg, i) / "boot.json",
            )
            for i, c in enumerate(configs, start=1)
        ]

    def run(self) -> DrillResult:
        cfg = self.cfg
        self.prepared = prepare(cfg)  # before anything is written or started
        self.provider.command = self.prepared.command
        self.out.mkdir(parents=True, exist_ok=True)
        self.bundle_zip.write_bytes(self.prepared.bundle.data)
        started = utc_now()
        run_id = cfg.run_id or f"drill-{started.strftime('%Y%m%d-%H%M%S')}-s{cfg.seed}"
        try:
            store_url, options = self._store(run_id)
            return self._run(run_id, store_url, options, started)
        finally:
            self._stop_node()

    def _stop_node(self) -> None:
        for plane in self.planes:
            plane.stop(30.0)

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
        configs = self._write_configs(run_id, store_url, options)
        base = base_workload(len(entries), cfg.capacity_delay_s)
        (self.out / "workload.json").write_text(json.dumps(base, indent=2) + "\n")
        self._upload_manifest(entries, configs[0])
        self._log(
            f"run {run_id}: {len(entries)} episodes, {cfg.nodes} node(s), concurrency {cfg.concurrency}, "
            f"store {store_url}; "
            f"lifetimes exponential with mean {cfg.lifetime_s:g} s, notice {cfg.notice_s:g} s, "
            f"capacity delay mean {cfg.capacity_delay_s:g} s, seed {cfg.seed}"
        )
        run = DrilledRun(
            store, layout, configs[0], frozenset(e.id for e in entries), time.monotonic() + cfg.timeout_s
        )
        self._make_planes(configs)
        members = [_Member(plane, i) for i, plane in enumerate(self.planes, start=1)]
        operator = self._operator(run, store_url, options, configs)
        finished = self._operated(run, members, operator)
        result = DrillResult(
            config=cfg,
            run_id=run_id,
            store_url=store_url,
            store_options=options,
            started=started,
            ended=utc_now(),
            incarnations=sum(p.starts for p in self.planes),
            kills=tuple(self.kills),
            finished=finished,
            episodes=len(entries),
            results=max(0, run.results()),
            exit_codes=tuple(self.exit_codes),
            notes=tuple(self.notes),
        )
        (self.out / "drill.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
        return result

    # the operator ---------------------------------------------------------------------------

    def _operator(
        self, run: DrilledRun, store_url: str, options: dict[str, Any], configs: list[Path]
    ) -> Operator:
        """The run's operator under its lease, and `operator.json` for a second one (attach.py)."""
        cfg, run_id = self.cfg, run.layout.run_id
        nodes = zip(self.planes, configs, strict=True)
        write_operator_file(
            self.out,
            DrillRun(
                run_id,
                store_url,
                options,
                cfg.lease_ttl_s,
                tuple(
                    DrillNode(p.node, c.resolve(), node_dir(cfg, i))
                    for i, (p, c) in enumerate(nodes, start=1)
                ),
            ),
        )
        return Operator(
            local_outputs(run_id, store_url, tuple(p.node for p in self.planes)),
            {p.node: p for p in self.planes},
            DRILL_GRANT,
            run.store,
            timing=OPERATOR_TIMING,
            start_timeout_s=30.0,
            lease=OperatorLease(run.store, run_id, holder=holder_name("drill"), ttl_s=cfg.lease_ttl_s),
        )

    def _operated(self, run: DrilledRun, members: list[_Member], operator: Operator) -> bool:
        """Each node's first start (the stack coming up, `initial`), then the operator's loop beside
        the chaos until every episode has a result (True) or the time limit (False)."""
        for plane in self.planes:
            plane.start(30.0)
        operating = threading.Event()
        thread = threading.Thread(
            target=self._operate, args=(operator, operating), name="operator", daemon=True
        )
        thread.start()
        finished = False
        try:
            finished = self._loop(run, members, operator)
        finally:
            operating.set()
            thread.join(timeout=60)
            self._let_go(operator, finished=finished)
        return finished

    def _let_go(self, operator: Operator, *, finished: bool) -> None:
        """The drill's operator ends its turn: after a last check when every episode has its result
        (the lease then says `finished`, and a later operator exits at once), else released."""
        lines: list[Line] = []
        try:
            lines = operator.check_all() if finished else []
        finally:
            operator.let_go(lines)

    def _operate(self, operator: Operator, stop: threading.Event) -> None:
        """The operator's own loop (as it runs beside a cloud's nodes): a check every interval. Its
        starts show as the controller's `node start N` lines; what went wrong is logged as it is."""
        reading = False
        while not stop.wait(OPERATOR_TIMING.interval_s):
            for line in operator.check_all():
                if line.action in ("refused", "error"):
                    self._log(f"operator: {line.action}: {line.message}")
            if operator.reading and not reading and operator.standing is not None:
                self._log(f"operator: {operator.standing.line()}")  # another operator took the lease
            reading = operator.reading

    def _loop(self, run: DrilledRun, members: list[_Member], operator: Operator) -> bool:
        """Chaos on every node until every episode has a result (True) or the time limit (False)."""
        cfg = self.cfg
        while True:
            now = time.monotonic()
            done = run.results()
            all_done = done >= len(run.ids)
            for m in members:
                self._watch(m, run, operator, now=now, all_done=all_done)
            if all_done and all(m.chaos.over for m in members):
                return True
            if now >= run.deadline:
                self._stop_node()
                self.notes.append(
                    f"stopped at the time limit of {cfg.timeout_s:g} s before every episode had a result"
                )
                self._log(self.notes[-1])
                return False
            self._status(done, len(run.ids), members, len(self.kills))
            time.sleep(0.05)

    def _watch(self, m: _Member, run: DrilledRun, operator: Operator, *, now: float, all_done: bool) -> None:
        """One node: a new life when it was started, its own end, the provider's notice and kill."""
        plane = m.plane
        launch = plane.latest  # its number and launch time come together (see plane.py)
        if launch is not None and launch.number != m.chaos.start:  # started (by the operator after the first)
            m.chaos = self.provider.new_life(plane, launch)
        self.exit_codes.extend(code for _, code in plane.exits())
        if not m.chaos.over and not plane.state().running:  # it ended by itself (or was stopped)
            m.chaos.over = True
            code = plane.process.returncode if plane.process is not None else None
            # its last results may have reached the store after this round counted them
            all_done = all_done or run.results() >= len(run.ids)
            if all_done:
                who = "the operator" if plane.state().raw == "stopped" else "itself"
                name = node_name(self.cfg, plane)
                self._log(f"{name}stopped by {who} (exit {code}): every episode has its result")
                return
            tail = _tail(node_dir(self.cfg, m.index) / "logs" / f"node-{m.chaos.start}.log")
            status = operator.status()[m.index - 1]
            m.early += 1
            if code == 2 or m.early == 3 or not status.retry:
                # a config the agent refuses, an agent that keeps stopping, or one that stopped
                # for good (a stop rule): nothing will finish the run
                raise DrillError(
                    f"the agent exited with {code} before the run was done ({status.label}): {tail}"
                )
            self.notes.append(
                f"{node_name(self.cfg, plane)}start {m.chaos.start}: the agent exited with {code} "
                "before the run was done"
            )
            self._log(f"{self.notes[-1]}: {tail}")
        if m.chaos.by_samples and not m.chaos.over:
            self.provider.preempt_by_samples(run, m.chaos, plane, now)
        if not m.chaos.over:
            kill = self.provider.act(run, m.chaos, plane, now=now, all_done=all_done)
            if kill is not None:
                m.early = 0
                self.kills.append(kill)
                self.exit_codes.append(kill.agent_exit)
                self._log(
                    f"{node_name(self.cfg, plane)}taken (preempted); capacity comes back in "
                    f"{kill.capacity_delay_s:.1f} s"
                )

    def _status(self, done: int, total: int, members: list[_Member], kills: int) -> None:
        if self.display is None:
            return
        starts = sum(m.plane.starts for m in members)
        if len(members) == 1:
            c = members[0].chaos
            phase = "running" if not c.over else "waiting for capacity"
            if c.notice_at is not None and not c.over:
                phase = "notice sent"
            text = f"node start {max(1, starts)}: {phase}; interruptions {kills}; restarts {starts - 1}"
        else:
            up = sum(1 for m in members if not m.chaos.over)
            text = f"{up}/{len(members)} nodes up; interruptions {kills}; restarts {starts - len(members)}"
        self.display.update(max(0, done), text)


@dataclass
class _Member:
    """One node of the drill: its control plane, its current life, its early exits in a row."""

    plane: LocalPlane
    index: int
    chaos: NodeLife = field(default_factory=NodeLife)
    early: int = 0


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
