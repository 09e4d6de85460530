"""What every part of the node agent shares: its state and its steps, declared once.

`Agent` (spoteval/agent/loop.py) is made of parts, one file per phase: `Holding` (a pool node's
lease), `Attempts` (dispatch and the end of each attempt), `Starting` (the record read before
anything starts) and `Stopping` (a notice, a stop rule, the end of the run). Each part derives from
`AgentState`, which declares the attributes `Agent.__init__` sets and the steps one part calls on
another, so the type checker sees every part against the one declaration. A step's body here is
never reached: `Agent` or another part defines it, earlier in the method resolution order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from spoteval.agent import episodes as ep
from spoteval.agent import history as hist
from spoteval.agent.boot import BootTimes
from spoteval.agent.claimed import EpisodeQueue
from spoteval.agent.config import AgentConfig
from spoteval.agent.evalenv import Prepared, Preparing
from spoteval.agent.health import ServerWatch
from spoteval.agent.notices import Notice, Watcher
from spoteval.agent.price import Price
from spoteval.agent.rules import Stop
from spoteval.agent.uploader import Item, Uploader
from spoteval.manifest import ManifestEntry
from spoteval.record import RunLayout
from spoteval.store import Store


class AgentState:
    """The agent's state (set by `Agent.__init__`) and the steps its parts call on one another."""

    # --- the run --------------------------------------------------------------------------------
    config: AgentConfig
    store: Store
    layout: RunLayout
    manifest: dict[str, ManifestEntry]
    order: list[str]
    incarnation: str
    work_dir: str
    model_url: str
    log: Callable[[str], None]
    boot: BootTimes
    started_mono: float
    price: Price
    prev: hist.Billed
    spooled: list[Item]
    # --- the model server and the eval project --------------------------------------------------
    server: ep.ModelServer
    health: ServerWatch
    eval_env: Preparing
    prepared: Prepared | None
    # --- scheduling (the agent's main thread only) ----------------------------------------------
    dispatches: Iterator[int]
    pending: EpisodeQueue
    running: dict[str, ep.Running]
    doomed: dict[tuple[str, int], ep.Running]  # given up while running: stopped, never recorded
    seen_epoch: int
    settling: list[tuple[ep.Running, ep.Ended]]
    final: set[str]
    failures: dict[str, int]
    next_n: dict[str, int]
    in_flight: dict[tuple[str, int], datetime]
    counts: dict[str, int]
    durations: deque[float]
    durable_s: list[float]
    first_dispatch_mono: float | None
    record_read_s: float
    # --- notices and stops ----------------------------------------------------------------------
    watchers: dict[str, Watcher]
    noticed: threading.Event
    notice: Notice | None
    notice_mono: float
    deadline_mono: float
    stop: Stop | None
    exit_code: int

    # --- steps: Agent's -------------------------------------------------------------------------

    @property
    def up(self) -> Uploader:
        raise NotImplementedError

    def event(
        self, kind: str, reason: str | None, details: Mapping[str, Any], when: datetime | None = None
    ) -> Item:
        raise NotImplementedError

    def _wait_durable(self, item: Item, timeout: float, *, until_notice: bool = True) -> bool:
        raise NotImplementedError

    def _in_flight_detail(self) -> list[list[Any]]:
        raise NotImplementedError

    def _counts(self) -> dict[str, int]:
        raise NotImplementedError

    def _on_exit(self, run: ep.Running) -> None:
        raise NotImplementedError

    def _uptime_s(self) -> float:
        raise NotImplementedError

    def _cost(self) -> float | None:
        raise NotImplementedError

    def _pump(self, timeout: float) -> None:
        raise NotImplementedError

    # --- steps: Attempts' -----------------------------------------------------------------------

    def _finalize(self, run: ep.Running, ended: ep.Ended) -> None:
        raise NotImplementedError

    def _during_shutdown(self, run: ep.Running, ended: ep.Ended) -> ep.Ended:
        raise NotImplementedError

    # --- steps: Holding's -----------------------------------------------------------------------

    def _standing(self, episode: str) -> tuple[str, str | None]:
        raise NotImplementedError

    def _doomed_exit(self, run: ep.Running) -> bool:
        raise NotImplementedError
