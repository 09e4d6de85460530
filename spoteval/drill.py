"""The local drill: the whole operated run on one machine, with a chaos controller as the provider.

No cloud account: a store (a local folder, or S3 served by a moto server the drill starts), the
stand-in model server, the real node agent with provider `local`, and a controller that does what a
spot provider does to a node:

- it starts the node through its startup path: a small "node startup" process (`python -m
  spoteval.drill node ...`, what the startup script is on a real node) notes the boot time in the
  agent's boot file and starts the agent with the same config and store every time;
- it takes the node away after an exponentially distributed lifetime (default mean 45 s), counted
  from the node's start: `notice_s` before the end it sends SIGTERM to the agent's process group
  (the notice), and at the end it freezes and SIGKILLs every process the node started (the node is
  gone, whatever the agent was doing); it then records a `preempted` event, as the provider's
  server-side event capture does;
- it waits a capacity delay (exponential, default mean 5 s) and starts the node again.

Just before each notice the controller freezes the node (SIGSTOP), lists the episodes in flight from
the processes' command lines, delivers the notice and lets the node run on: the tests compare that
list with the attempts the agent recorded as interrupted.

On Linux the node startup process is a child subreaper, so an episode or model server orphaned by
the agent stays inside the node and dies with it. Elsewhere such orphans may escape (the drill then
kills what it can see).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

from spoteval.record import (
    Event,
    ManifestEntry,
    RunLayout,
    dump_manifest,
    format_time,
    parse_manifest,
    utc_now,
)
from spoteval.store import Store, StoreError

PACKAGE_ROOT: Final = Path(__file__).resolve().parent.parent
NODE_ID: Final = "drill-node-1"
#: The sample episode's defaults: 0.5-3 s each, 3 % failing as model failures.
SAMPLE_SECONDS: Final = (0.5, 3.0)
SAMPLE_FAIL_RATE: Final = 0.03
#: Prices of the drill's node and of the options the placement compares (per node-hour).
SPOT_PRICE: Final = 1.20
ON_DEMAND_PRICE: Final = 3.40
PR_SET_CHILD_SUBREAPER: Final = 36
_PREEMPTED_SEQ: Final = 900_000


class DrillError(Exception):
    """The drill cannot run as asked (bad option, missing tool, the agent refusing its config)."""


@dataclass(frozen=True)
class DrillConfig:
    out: Path
    store: str = "file"  # "file", "s3" (moto server on loopback), or a store URL
    episodes: int = 320
    concurrency: int = 8
    lifetime_s: float = 45.0
    notice_s: float = 2.0
    capacity_delay_s: float = 5.0
    seed: int = 0
    eval_command: tuple[str, ...] | None = None
    server_command: tuple[str, ...] | None = None
    episode_seconds: tuple[float, float] = SAMPLE_SECONDS
    fail_rate: float = SAMPLE_FAIL_RATE
    max_attempts: int = 2
    heartbeat_s: float = 5.0
    server_startup_s: float = 0.5
    timeout_s: float = 170.0
    manifest: Path | None = None
    run_id: str | None = None

    def check(self) -> None:
        for name in ("lifetime_s", "capacity_delay_s", "timeout_s", "heartbeat_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise DrillError(f"--{name.replace('_', '-')} must be > 0, got {value}")
        if not math.isfinite(self.notice_s) or self.notice_s < 0:
            raise DrillError(f"--notice-s must be >= 0, got {self.notice_s}")
        if self.episodes < 1 and self.manifest is None:
            raise DrillError(f"--episodes must be >= 1, got {self.episodes}")
        if self.concurrency < 1:
            raise DrillError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.server_command is not None and not any("{port}" in a for a in self.server_command):
            raise DrillError(
                "--server-command must contain {port}: the drill chooses the model server's port"
            )
        if self.eval_command is not None:
            joined = " ".join(self.eval_command)
            for placeholder in ("{episode_id}", "{output}"):
                if placeholder not in joined:
                    raise DrillError(f"--eval-command must contain {placeholder}")


@dataclass(frozen=True)
class Kill:
    """One time the controller took the node away."""

    incarnation: int
    launched: datetime
    lifetime_s: float
    notice_at: datetime | None
    killed_at: datetime
    in_flight: tuple[str, ...]  # episodes running when the notice came (or at the kill, without one)
    observed: bool  # False when episodes cannot be told apart by their command lines
    agent_exit: int | None  # the agent's exit code, when it had exited before the kill
    capacity_delay_s: float


@dataclass(frozen=True)
class DrillResult:
    config: DrillConfig
    run_id: str
    store_url: str
    store_options: Mapping[str, Any]
    started: datetime
    ended: datetime
    incarnations: int
    kills: tuple[Kill, ...]
    finished: bool
    episodes: int
    results: int
    exit_codes: tuple[int | None, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "store": self.store_url,
            "started": format_time(self.started),
            "ended": format_time(self.ended),
            "seconds": (self.ended - self.started).total_seconds(),
            "incarnations": self.incarnations,
            "finished": self.finished,
            "episodes": self.episodes,
            "results": self.results,
            "exit_codes": list(self.exit_codes),
            "notes": list(self.notes),
            "settings": {
                "lifetime_s": self.config.lifetime_s,
                "notice_s": self.config.notice_s,
                "capacity_delay_s": self.config.capacity_delay_s,
                "concurrency": self.config.concurrency,
                "seed": self.config.seed,
            },
            "kills": [
                {
                    "incarnation": k.incarnation,
                    "launched": format_time(k.launched),
                    "lifetime_s": k.lifetime_s,
                    "notice_at": format_time(k.notice_at) if k.notice_at else None,
                    "killed_at": format_time(k.killed_at),
                    "in_flight": list(k.in_flight),
                    "observed": k.observed,
                    "agent_exit": k.agent_exit,
                    "capacity_delay_s": k.capacity_delay_s,
                }
                for k in self.kills
            ],
        }


# --- processes ----------------------------------------------------------------------------------


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


def _freeze(root: int) -> list[int]:
    """SIGSTOP `root` and every process below it, until no new one appears (a fork racing the freeze)."""
    stopped: list[int] = [root]
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, signal.SIGSTOP)
    for _ in range(20):
        fresh = [p.pid for p in descendants(root) if p.pid not in stopped]
        if not fresh:
            break
        _signal_all(fresh, signal.SIGSTOP)
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
    """The node is gone: freeze every process below `root`, then SIGKILL them and `root` itself."""
    for _ in range(20):
        with frozen(root) as procs:
            _signal_all([p.pid for p in procs], signal.SIGKILL)
        if not descendants(root):
            break
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, signal.SIGKILL)


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


# --- the node's startup path --------------------------------------------------------------------


def node_main(argv: Sequence[str] | None = None) -> int:
    """`python -m spoteval.drill node --config agent.json --boot-file F`: what a startup script does.

    It notes the boot time, then starts the agent in its own process group and stays as the node's
    init: it reaps every process the node leaves behind and exits with the agent's exit code once
    nothing is left. SIGTERM (the provider's notice) reaches the agent through the group; this
    process ignores it (a machine does not stop for a notice).
    """
    parser = argparse.ArgumentParser(prog="python -m spoteval.drill node")
    parser.add_argument("--config", required=True)
    parser.add_argument("--boot-file", required=True)
    args = parser.parse_args(argv)
    boot = utc_now()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # ignored at the OS level (a Python handler would be reset while this process shuts down)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(args.boot_file).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{args.boot_file}.tmp"
    Path(tmp).write_text(json.dumps({"boot_time": format_time(boot), "source": "drill"}))
    os.replace(tmp, args.boot_file)
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    agent = subprocess.Popen(
        [sys.executable, "-m", "spoteval.agent", "--config", args.config],
        env=env,
        preexec_fn=_default_sigterm,  # noqa: PLW1509 - the agent must not inherit SIG_IGN-like handlers
    )
    code: int | None = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == agent.pid:
            code = os.waitstatus_to_exitcode(status)
            agent.returncode = code
    return 0 if code is None else (code if code >= 0 else 128 - code)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _pythonpath() -> str:
    parts = [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))


# --- the store ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """A moto server (S3) on loopback with one bucket, for `--store s3`."""

    def __init__(self, workdir: Path) -> None:
        binary = Path(sys.executable).parent / "moto_server"
        if not binary.exists() and shutil.which("moto_server") is None:
            raise DrillError("--store s3 needs the moto server: install it with pip install 'moto[server]'")
        self.port = free_port()
        self.log = open(workdir / "moto.log", "wb")  # noqa: SIM115 - open for the server's lifetime
        self.process = subprocess.Popen(
            [str(binary) if binary.exists() else "moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise DrillError(
                    f"the moto server exited with {self.process.returncode} (see {workdir}/moto.log)"
                )
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise DrillError("the moto server did not answer within 60 s") from None
                time.sleep(0.1)

    def options(self) -> dict[str, Any]:
        return {
            "endpoint": self.url,
            "region": "us-east-1",
            "access_key_id": "drill",
            "secret_access_key": "drill",
            "allow_http": True,
        }

    def create_bucket(self, bucket: str) -> None:
        req = urllib.request.Request(f"{self.url}/{bucket}", method="PUT")
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise DrillError(f"creating the drill's bucket failed: HTTP {exc.code}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.log.close()


# --- display ------------------------------------------------------------------------------------


def _status_progress() -> Any:
    """A rich Progress with a status line under the bar (episodes done, interruptions, restarts)."""
    from rich.progress import Progress
    from rich.text import Text

    class StatusProgress(Progress):
        status = ""

        def get_renderables(self) -> Iterator[Any]:
            yield self.make_tasks_table(self.tasks)
            yield Text(self.status)

    return StatusProgress


class Display:
    """Progress: a live bar and status line on a terminal; plain time-stamped lines when piped."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream or sys.stdout, highlight=False)
        if not self.console.is_terminal:
            self.console = Console(file=stream or sys.stdout, highlight=False, width=130, soft_wrap=True)
        self.live = self.console.is_terminal
        self.t0 = time.monotonic()
        self.total = total
        self.last_plain = 0.0
        self.progress = _status_progress()(
            TextColumn("episodes done"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
        )
        self.task = self.progress.add_task("drill", total=total)

    def __enter__(self) -> Display:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def log(self, message: str) -> None:
        self.console.print(f"[{time.monotonic() - self.t0:6.1f} s] {message}", markup=False)

    def set_total(self, total: int) -> None:
        self.total = total
        self.progress.update(self.task, total=total)

    def update(self, done: int, status: str) -> None:
        self.progress.status = status
        self.progress.update(self.task, completed=done)
        now = time.monotonic()
        if not self.live and now - self.last_plain >= 10.0:
            self.last_plain = now
            self.log(f"{done}/{self.total} episodes done; {status}")


# --- the drill ----------------------------------------------------------------------------------


def sample_eval_command(cfg: DrillConfig) -> tuple[str, ...]:
    low, high = cfg.episode_seconds
    return (
        sys.executable,
        "-m",
        "spoteval.sample_episode",
        "--episode-id",
        "{episode_id}",
        "--model-url",
        "{model_url}",
        "--output",
        "{output}",
        "--seconds",
        str(low),
        "--max-seconds",
        str(high),
        "--fail-rate",
        str(cfg.fail_rate),
        "--seed",
        str(cfg.seed),
    )


def standin_command(cfg: DrillConfig) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "spoteval.standin",
        "--port",
        "{port}",
        "--startup-delay",
        str(cfg.server_startup_s),
    )


def agent_config(
    cfg: DrillConfig, run_id: str, store_url: str, store_options: Mapping[str, Any], port: int
) -> dict[str, Any]:
    """The agent's config for the drill's node (the same one at every start)."""
    node_dir = cfg.out.resolve() / "node"
    server = [a.replace("{port}", str(port)) for a in (cfg.server_command or standin_command(cfg))]
    return {
        "run_id": run_id,
        "store": store_url,
        "store_options": dict(store_options),
        "node": {
            "id": NODE_ID,
            "provider": "local",
            "region": "local",
            "zone": "local-a",
            "instance_type": "standin",
            "market": "spot",
        },
        "server": {"command": server, "url": f"http://127.0.0.1:{port}", "ready_timeout_s": 120},
        "episodes": {
            "command": list(cfg.eval_command or sample_eval_command(cfg)),
            "concurrency": cfg.concurrency,
            "max_attempts": cfg.max_attempts,
            "timeout_s": 600,
        },
        "price": {"per_hour": SPOT_PRICE, "currency": "USD"},
        "stop_rules": {"on_done": "exit"},
        "heartbeat_s": cfg.heartbeat_s,
        "spool_dir": str(node_dir / "spool"),
        "work_dir": str(node_dir / "work"),
        "boot_file": str(node_dir / "boot.json"),
        "sigterm_grace_s": max(cfg.notice_s, 0.1),
    }


def base_workload(episodes: int, capacity_delay_s: float) -> dict[str, Any]:
    """What the record cannot know, for the placement of the next run: the options' prices, and the
    drill's capacity delay as W in case the run had no restart to measure it."""
    return {
        "episodes": episodes,
        "prices": {"spot": SPOT_PRICE, "on_demand": ON_DEMAND_PRICE},
        "restart": {"wait_minutes": capacity_delay_s / 60.0},
        "spot_margin": 0.10,
    }


class Drill:
    """One drill run: set up, operate the node under chaos until every episode has a result."""

    def __init__(self, cfg: DrillConfig, display: Display | None = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.display = display
        self.out = cfg.out.resolve()
        self.moto: MotoServer | None = None
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
            self.moto = MotoServer(self.out)
            bucket = f"drill-{run_id.lower()}"[:63].rstrip("-.")
            self.moto.create_bucket(bucket)
            return f"s3://{bucket}/evals", self.moto.options()
        return kind, {}

    def _manifest(self) -> list[ManifestEntry]:
        if self.cfg.manifest is not None:
            try:
                return parse_manifest(self.cfg.manifest.read_text(encoding="utf-8"))
            except OSError as exc:
                raise DrillError(f"--manifest {self.cfg.manifest}: {exc.strerror or exc}") from None
            except ValueError as exc:
                raise DrillError(f"--manifest {self.cfg.manifest}: {exc}") from None
        width = max(4, len(str(self.cfg.episodes)))
        return [ManifestEntry(f"ep-{i:0{width}d}", {"index": i}) for i in range(1, self.cfg.episodes + 1)]

    def _agent_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "spoteval.agent", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": _pythonpath()},
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
                env={**os.environ, "PYTHONPATH": _pythonpath()},
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
            provider="local",
            region="local",
            zone="local-a",
            instance_type="standin",
            market="spot",
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
            observed=identifiable(cfg.eval_command or sample_eval_command(cfg)),
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


def identifiable(command: Sequence[str]) -> bool:
    """Whether episodes in flight can be told from their command lines: `{episode_id}` is a whole
    argument (or `--name={episode_id}`) of the episode command."""
    return any(a == "{episode_id}" or a.endswith("={episode_id}") for a in command)


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


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m spoteval.drill node ...` (the node's startup path; the drill itself is scripts/drill.py)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "node":
        print("usage: python -m spoteval.drill node --config agent.json --boot-file FILE", file=sys.stderr)
        return 2
    return node_main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
