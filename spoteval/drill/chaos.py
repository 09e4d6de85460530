"""The drill's provider: how long it lets each node life last, its notice, taking the node, and the
capacity it holds back after (spoteval/drill/controller.py drives it on every node).

A life is drawn when the node starts: an exponential lifetime (mean `lifetime_s`), the notice
`notice_s` before its end, or with `preempt_after_samples` / `preempt_after_results` the first life
ends once that many are in the store. At the notice the node is frozen, the episodes in flight listed
from its processes' command lines and SIGTERM sent to the agent's process group; at the end every
process the node started is frozen and killed, a `preempted` event recorded as the provider's event
capture does, and the capacity held back for an exponential delay (mean `capacity_delay_s`).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from spoteval.drill.config import NODE_PLACE, DrillConfig, Kill, node_dir
from spoteval.drill.plane import Launch, LocalPlane
from spoteval.drill.procs import descendants, episodes_in, frozen, identifiable
from spoteval.record import Event, RunLayout, format_time, utc_now
from spoteval.store import Store, StoreError

_PREEMPTED_SEQ: Final = 900_000


@dataclass
class NodeLife:
    """The provider's view of a node's current life."""

    start: int = 0  # the plane's start count this life belongs to
    lifetime: float = 0.0
    launched: datetime = field(default_factory=utc_now)
    t_notice: float = math.inf
    t_kill: float = math.inf
    notice_at: datetime | None = None
    in_flight: set[str] = field(default_factory=set)
    over: bool = True  # taken, or ended by itself
    by_samples: bool = False  # taken once `preempt_after_samples` samples are in the store


@dataclass(frozen=True)
class DrilledRun:
    """The run under the drill: its record, the first node's config, its episodes, the time limit."""

    store: Store
    layout: RunLayout
    config: Path
    ids: frozenset[str]
    deadline: float

    def results(self) -> int:
        """How many episodes have their result in the store (-1: the store did not answer)."""
        try:
            return len(self.store.list(self.layout.results_prefix))
        except StoreError:
            return -1


def release_file(cfg: DrillConfig, index: int) -> Path:
    """Created when node `index` is not the one taken at N samples: its shards hold no more."""
    return node_dir(cfg, index) / "hold-released"


def node_name(cfg: DrillConfig, plane: LocalPlane) -> str:
    """How the drill's log names a node: `node ` alone, its id in a pool."""
    return "node " if cfg.nodes == 1 else f"{plane.node} "


class Provider:
    """The drill's provider over the nodes' planes: lifetimes, notices, kills, capacity delays."""

    def __init__(
        self,
        cfg: DrillConfig,
        planes: Sequence[LocalPlane],
        command: Sequence[str],
        log: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self.planes = planes
        self.command = tuple(command)  # the episode command, to know its processes by
        self.log = log
        self.lifetimes = random.Random(f"lifetimes:{cfg.seed}")
        self.delays = random.Random(f"capacity:{cfg.seed}")
        self.preempted_seq = _PREEMPTED_SEQ

    def new_life(self, plane: LocalPlane, launch: Launch) -> NodeLife:
        """The node has just started (`launch`): draw how long the provider lets it live."""
        lifetime = self.lifetimes.expovariate(1.0 / self.cfg.lifetime_s)
        notice_s = self.cfg.notice_s
        counted = self._counted()
        if counted is not None and launch.number == 1:
            n, what = counted
            work = "a shard" if self.cfg.preempt_after_samples is not None else "an episode"
            unless = "" if self.cfg.nodes == 1 else f" if it runs {work} then; else in {lifetime:.1f} s"
            self.log(
                f"{node_name(self.cfg, plane)}start 1 (it will be taken once {n} {what} are in the store"
                f"{unless})"
            )
            return NodeLife(start=1, lifetime=lifetime, launched=launch.at, over=False, by_samples=True)
        self.log(f"{node_name(self.cfg, plane)}start {launch.number} (its lifetime will be {lifetime:.1f} s)")
        return NodeLife(
            start=launch.number,
            lifetime=lifetime,
            launched=launch.at,
            t_notice=launch.at_mono + max(0.0, lifetime - notice_s) if notice_s > 0 else math.inf,
            t_kill=launch.at_mono + lifetime,
            over=False,
        )

    def _counted(self) -> tuple[int, str] | None:
        """The first life's end by a count in the store: (how many, of what), or None."""
        if self.cfg.preempt_after_samples is not None:
            return self.cfg.preempt_after_samples, "harness samples"
        if self.cfg.preempt_after_results is not None:
            return self.cfg.preempt_after_results, "episode results"
        return None

    def preempt_by_samples(self, run: DrilledRun, life: NodeLife, plane: LocalPlane, now: float) -> None:
        """`preempt_after_samples` (or `_results`): once that many are in the store, the notice is now
        for a node that runs a shard (its shard runners hold there: spoteval/harness/hold.py); a node
        that runs none lives its drawn lifetime instead. With `_results` a lone node is taken then
        whatever it runs (its episodes do not hold); in a pool, only a node that runs an episode."""
        counted = self._counted()
        assert counted is not None
        try:
            if self.cfg.preempt_after_samples is not None:
                keys = run.store.list(f"{run.layout.prefix}harness/")
                samples = sum(1 for key in keys if "/samples/" in key)
            else:
                samples = len(run.store.list(run.layout.results_prefix))
        except StoreError:
            return
        if samples < counted[0]:
            return
        life.by_samples = False
        process = plane.process
        checked = self.cfg.preempt_after_samples is not None or self.cfg.nodes > 1
        if checked and (process is None or not episodes_in(descendants(process.pid), run.ids)):
            index = next(i for i, p in enumerate(self.planes, start=1) if p is plane)
            release_file(self.cfg, index).touch()
            latest = plane.latest
            launched = latest.at_mono if latest is not None else now
            life.t_kill = launched + life.lifetime
            life.t_notice = life.t_kill - self.cfg.notice_s if self.cfg.notice_s > 0 else math.inf
            return
        life.t_notice = now if self.cfg.notice_s > 0 else math.inf
        life.t_kill = now + self.cfg.notice_s
        life.lifetime = (utc_now() - life.launched).total_seconds() + self.cfg.notice_s
        who = "the node" if self.cfg.nodes == 1 else plane.node
        self.log(f"{samples} {counted[1]} in the store: {who} is taken")

    def act(
        self, run: DrilledRun, life: NodeLife, plane: LocalPlane, *, now: float, all_done: bool
    ) -> Kill | None:
        """What the provider does to the running node now: the notice, then taking it."""
        with plane.lock:
            process = plane.process
            assert process is not None
            exited = process.poll() is not None
            if exited and not plane.held:
                return None  # it ended by itself, before any notice: not the provider's doing
            if life.notice_at is not None and exited and all_done:
                plane.release()  # the agent finished after the notice: nothing left to take
                return None
            if life.notice_at is None and now >= life.t_notice and not exited and not all_done:
                self._notice(run, life, plane)
            if now < life.t_kill:
                return None
            return self._take(run, life, plane)

    def _notice(self, run: DrilledRun, life: NodeLife, plane: LocalPlane) -> None:
        process = plane.process
        assert process is not None
        with frozen(process.pid, settle=True) as procs:
            # counted again with the node frozen: a node that has just finished gets no notice
            if run.results() < len(run.ids):
                life.in_flight = episodes_in(procs, run.ids)
                life.notice_at = utc_now()
                plane.hold()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        if life.notice_at is not None:
            self.log(f"notice (SIGTERM to the agent) with {len(life.in_flight)} episode(s) in flight")

    def _take(self, run: DrilledRun, life: NodeLife, plane: LocalPlane) -> Kill:
        process = plane.process
        assert process is not None
        code = process.returncode
        if process.poll() is None and life.notice_at is None:  # taken without notice: in flight dies now
            with frozen(process.pid, settle=True) as procs:
                life.in_flight = episodes_in(procs, run.ids)
        delay = self.delays.expovariate(1.0 / self.cfg.capacity_delay_s)
        plane.take(delay)
        life.over = True
        killed_at = utc_now()
        self._write_preempted(run, killed_at, life.launched, plane.node)
        return Kill(
            incarnation=life.start,
            launched=life.launched,
            lifetime_s=life.lifetime,
            notice_at=life.notice_at,
            killed_at=killed_at,
            in_flight=tuple(sorted(life.in_flight)),
            observed=identifiable(self.command),
            agent_exit=code,
            capacity_delay_s=delay,
            node=plane.node,
        )

    def _write_preempted(self, run: DrilledRun, at: datetime, launched: datetime, node: str) -> None:
        """The `preempted` event, as the provider's server-side event capture records it."""
        event = Event(
            time=at,
            run_id=run.layout.run_id,
            node=node,
            kind="preempted",
            reason="provider",
            **NODE_PLACE,
            details={"observer": "drill", "launch_time": format_time(launched)},
        )
        self.preempted_seq += 1
        run.store.put_new(run.layout.event(at, node, self.preempted_seq), event.dumps())
