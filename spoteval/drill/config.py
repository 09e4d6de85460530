"""What a drill is asked to do (`DrillConfig`), what it did (`DrillResult`, one `Kill` per
preemption), and what it gives the node: the episode and model server commands, the agent's config
(through `build_agent_config`, as every node's), and the workload the report's placement starts from."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypedDict

from spoteval.agent.config import build_agent_config
from spoteval.grant import Grant
from spoteval.operate.decide import Timing
from spoteval.record import format_time

NODE_ID: Final = "drill-node-1"


class Place(TypedDict):
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str


#: Where the drill's node is, as its agent config and the controller's `preempted` events say.
NODE_PLACE: Final[Place] = {
    "provider": "local",
    "region": "local",
    "zone": "local-a",
    "instance_type": "standin",
    "market": "spot",
}
#: The sample episode's defaults: 0.5-3 s each, 3 % failing as model failures.
SAMPLE_SECONDS: Final = (0.5, 3.0)
SAMPLE_FAIL_RATE: Final = 0.03
#: Prices of the drill's node and of the options the placement compares (per node-hour).
SPOT_PRICE: Final = 1.20
ON_DEMAND_PRICE: Final = 3.40


class DrillError(Exception):
    """The drill cannot run as asked (bad option, missing tool, the agent refusing its config)."""


@dataclass(frozen=True)
class OwnEval:
    """The user's own eval in a drill: `--task` (with `--harness`), or `--eval-command` with
    `--workdir`, and what either needs (spoteval/drill/bundled.py makes the bundle of it). Paths are
    relative to the folder the drill runs in, or absolute."""

    task: str | None = None  # the one task syntax (spoteval/harness/taskref.py); None: the shipped task
    workdir: str | None = None  # the eval project (default: the task's folder)
    requirements: str | tuple[str, ...] | None = None  # a requirements file, or requirement lines
    excludes: tuple[str, ...] = ()
    ship_credentials: tuple[str, ...] = ()
    task_args: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    samples: tuple[Any, ...] | int | None = None  # ids, the first N, or (None) every sample
    shard_size: int | None = None
    startup_s: float | None = None
    sample_s: float | None = None
    timing_from: Path | None = None  # an earlier drill's folder: plan from its run record

    def check(self, harness: str | None, eval_command: bool) -> None:
        harness_only = {
            "--task": self.task,
            "--task-args": self.task_args or None,
            "--options": self.options or None,
            "--samples": self.samples,
            "--shard-size": self.shard_size,
            "--startup-s": self.startup_s,
            "--sample-s": self.sample_s,
            "--timing-from": self.timing_from,
        }
        given = [k for k, v in harness_only.items() if v is not None]
        if given and harness is None:
            raise DrillError(f"{given[0]} names a harness task: give --harness inspect|lm-eval")
        ships = {"--workdir": self.workdir, "--requirements": self.requirements}
        given = [k for k, v in ships.items() if v is not None]
        if given and harness is None and not eval_command:
            raise DrillError(f"{given[0]} is for your own eval: give --harness or --eval-command")
        for name, value in (("--shard-size", self.shard_size), ("--samples", self.samples)):
            if isinstance(value, int) and value < 1:
                raise DrillError(f"{name} must be >= 1, got {value}")
        for name, number in (("--startup-s", self.startup_s), ("--sample-s", self.sample_s)):
            if number is not None and (
                not math.isfinite(number) or number < 0 or (number == 0 and "sample" in name)
            ):
                raise DrillError(f"{name} must be {'> 0' if 'sample' in name else '>= 0'}, got {number}")


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
    harness: str | None = None  # "inspect" or "lm-eval": the harness's shipped task, in shards
    #: harness drills: the node's first life ends (notice, then kill) once this many samples are in
    #: the store, whatever its drawn lifetime; later lives are drawn as usual
    preempt_after_samples: int | None = None
    nodes: int = 1  # K > 1: K nodes of one run sharing its episodes through claims (a pool)
    #: the drill's operator lease: a second operator takes over this long after the drill's
    #: operator fell silent (the drill was killed); renewed every quarter of it
    lease_ttl_s: float = 20.0
    own: OwnEval = field(default_factory=OwnEval)  # the user's own task, folder and requirements

    def check(self) -> None:
        if self.nodes < 1:
            raise DrillError(f"--nodes must be >= 1, got {self.nodes}")
        if not math.isfinite(self.lease_ttl_s) or self.lease_ttl_s < 2:
            raise DrillError(f"lease_ttl_s must be at least 2, got {self.lease_ttl_s}")
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
        if self.harness is not None:
            from spoteval.harness import HARNESSES

            if self.harness not in HARNESSES:
                known = ", ".join(sorted(HARNESSES))
                raise DrillError(f"--harness {self.harness!r} is not one of {known}")
            if self.eval_command is not None or self.manifest is not None:
                raise DrillError("--harness runs a task in shards: give no --eval-command or --manifest")
        if self.preempt_after_samples is not None:
            if self.harness is None:
                raise DrillError("--preempt-after-samples counts harness samples: give --harness")
            if self.preempt_after_samples < 1:
                raise DrillError(f"--preempt-after-samples must be >= 1, got {self.preempt_after_samples}")
        self.own.check(self.harness, self.eval_command is not None)
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
    node: str = NODE_ID


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
                "nodes": self.config.nodes,
            },
            "kills": [
                {
                    "node": k.node,
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


#: The agents' `pool` section in a drill of K > 1 nodes: renewals and expiry scaled to its seconds.
DRILL_POOL: Final = {"batch": 8, "renew_s": 1.0, "expiry_s": 5.0}


#: The drill's operator checks every half second and backs off from half a second to two when the
#: node has no capacity (against a cloud: every 60 s, from 60 s to 15 minutes).
OPERATOR_TIMING: Final = Timing(
    interval_s=0.5, backoff_first_s=0.5, backoff_max_s=2.0, stop_timeout_s=30.0, done_grace_s=30.0
)
#: The drill's grant: its spot node never costs more than on-demand.
DRILL_GRANT: Final = Grant(price_cap=ON_DEMAND_PRICE, currency="USD")


def node_id(cfg: DrillConfig, index: int) -> str:
    """Node `index` (1..K) of the drill: `drill-node-1` alone, `drill-node-{i}` in a pool."""
    return NODE_ID if index == 1 else f"drill-node-{index}"


def node_dir(cfg: DrillConfig, index: int) -> Path:
    """The node's own folder (spool, work, boot file, logs): `node/`, in a pool `node-{i}/`."""
    return cfg.out.resolve() / ("node" if cfg.nodes == 1 else f"node-{index}")


def machine_command(argv: Sequence[str], folder: Path) -> list[str]:
    """The model server as the machine's own program: it starts in `folder` (where the drill runs,
    as an image's program would be installed there), not in the node's unpacked bundle."""
    return ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(folder), *argv]


def agent_config(
    cfg: DrillConfig,
    run_id: str,
    store_url: str,
    store_options: Mapping[str, Any],
    port: int,
    *,
    index: int = 1,
    episodes_command: Sequence[str] | None = None,
    eval_env: Mapping[str, Any] | None = None,
    home: Path | None = None,
) -> dict[str, Any]:
    """The agent's config for the drill's node `index` (the same one at every start): the episode
    command and eval environment of the drill's bundle (spoteval/drill/bundled.py), the eval
    environment's venvs on the node's own cache folder (`node/cache/venvs`, kept across its lives,
    as a VM's weights-cache disk), the model server started in `home` (the drill's folder)."""
    folder = node_dir(cfg, index)
    server = [a.replace("{port}", str(port)) for a in (cfg.server_command or standin_command(cfg))]
    server = machine_command(server, home or Path.cwd())
    env = None if eval_env is None else {**eval_env, "venvs_dir": str(folder / "cache" / "venvs")}
    return build_agent_config(
        run_id=run_id,
        store=store_url,
        store_options=store_options,
        node_id=node_id(cfg, index),
        **NODE_PLACE,
        server_url=f"http://127.0.0.1:{port}",
        server_command=server,
        ready_timeout_s=120,
        episodes_command=list(episodes_command) if episodes_command is not None else sample_eval_command(cfg),
        concurrency=cfg.concurrency,
        max_attempts=cfg.max_attempts,
        timeout_s=600,
        price_per_hour=SPOT_PRICE,
        currency="USD",
        on_done="exit",
        heartbeat_s=cfg.heartbeat_s,
        spool_dir=str(folder / "spool"),
        work_dir=str(folder / "work"),
        boot_file=str(folder / "boot.json"),
        sigterm_grace_s=max(cfg.notice_s, 0.1),
        pool=DRILL_POOL if cfg.nodes > 1 else None,
        eval_env=env,
    )


def base_workload(episodes: int, capacity_delay_s: float) -> dict[str, Any]:
    """What the record cannot know, for the placement of the next run: the options' prices, and the
    drill's capacity delay as W in case the run had no restart to measure it."""
    return {
        "episodes": episodes,
        "prices": {"spot": SPOT_PRICE, "on_demand": ON_DEMAND_PRICE},
        "restart": {"wait_minutes": capacity_delay_s / 60.0},
        "spot_margin": 0.10,
    }
