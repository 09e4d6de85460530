"""The agent's queue of episodes to run: a plain queue for a lone node, or one fed by claims in a pool.

The loop uses the queue as it used a deque (`popleft`, `append`, `appendleft`, `extend`, `clear`,
`len`, truth) and calls `fill(free)` before it dispatches and `finished(episode)` once a result is
in the store. `EpisodeQueue` is today's behaviour: every episode without a result, in manifest
order. `ClaimQueue` (the config's `pool` section) joins the run's pool (`spoteval.claims`): `extend`
joins with the episodes that have a result, `fill` takes what this node may start now (its claims,
taken over from a lost node, or stolen from a slow one), a thread renews the lease and watches the
other nodes, and `close` ends the lease so that whatever is left is taken over at once. It also
gives the run-wide figures every node enforces: the money and node time of all nodes together, and
the wall time since the run's first start.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from spoteval.agent import history as hist
from spoteval.agent.pool_start import read_pool_history
from spoteval.agent.scale_zero import ScaleTarget, parse_target
from spoteval.agent.taken_over import Book, takeover_check
from spoteval.agent.uploader import ATTEMPT, GIVE_UP, HOLD, WRITE, Gate, Item, Uploader
from spoteval.claims import Pool
from spoteval.claims.takeover import LOST, OWN, WAIT
from spoteval.record import Event, RecordError, RunLayout, format_time, parse_time, utc_now
from spoteval.store import Store, StoreError

if TYPE_CHECKING:
    from spoteval.agent.config import AgentConfig
    from spoteval.agent.notices import Notice
    from spoteval.agent.price import Price
    from spoteval.agent.rules import Stop

TICK_S: Final = 0.2


class EpisodeQueue:
    """Episodes to run, in order (a lone node: every episode without a result)."""

    def __init__(self) -> None:
        self.local: deque[str] = deque()

    def __len__(self) -> int:
        return len(self.local)

    def __bool__(self) -> bool:
        return bool(self.local)

    def __iter__(self) -> Iterator[str]:
        return iter(self.local)

    def popleft(self) -> str:
        return self.local.popleft()

    def append(self, episode: str) -> None:
        self.local.append(episode)

    def appendleft(self, episode: str) -> None:
        self.local.appendleft(episode)

    def extend(self, episodes: Iterable[str]) -> None:
        self.local.extend(episodes)

    def clear(self) -> None:
        self.local.clear()

    def read_history(
        self,
        store: Store,
        layout: RunLayout,
        order: list[str],
        *,
        node: str,
        now: datetime,
        pool: ThreadPoolExecutor,
        extra_events: Iterable[Event] = (),
    ) -> hist.History:
        """What the start reads of the record: every event (a lone node); `extra_events` (the spool's)
        count as if they were in the store already."""
        return hist.read_history(
            store, layout, order, node=node, now=now, pool=pool, extra_events=extra_events
        )

    def fill(self, free: int) -> None:
        """Make up to `free` episodes ready to pop (nothing to do for a lone node)."""

    def finished(self, episode: str) -> None:
        """The episode's result is in the store."""

    def close(self, state: Mapping[str, Any] | None = None) -> None:
        """The run is over on this node."""

    def run_wide(self, mine_s: float, my_cost: float | None) -> tuple[float | None, float | None]:
        """(node time, money) of the whole run; None: this node's own figures rule (no pool)."""
        return None, None

    def runtime_s(self) -> float | None:
        """Wall time since the run's first start (pools), else None."""
        return None

    # what this node's attempts may do (a pool's lease rules; a lone node: everything, always)

    def holder(self) -> str | None:
        """The lease holder this node's work runs under now (None: no pool)."""
        return None

    def holder_of(self, episode: str) -> str | None:
        """The holder under which the episode was taken (None: no pool)."""
        return None

    def standing(self, episode: str, holder: str | None) -> str:
        """OWN, WAIT or LOST for an attempt of `episode` under `holder` (spoteval/claims/takeover.py)."""
        return OWN

    def heir(self, holder: str | None, episode: str) -> str | None:
        """The holder an attempt started under `holder` belongs to now."""
        return holder

    def startable(self) -> bool:
        """Attempts may start now (a pool node: its lease is valid)."""
        return True

    def epoch(self) -> int:
        """Changes whenever what this node holds may have changed under it (a fence, a reclaim)."""
        return 0

    def gate(self) -> Gate | None:
        """What rules on this node's attempt writes (None: nothing, they are written)."""
        return None

    def keeps(self, item: Item) -> bool:
        """Whether a spooled attempt of an earlier incarnation is still this node's to write."""
        return True

    def has_result(self, episode: str) -> bool:
        """Whether the episode is known to have its result in the store."""
        return False


class ClaimQueue(EpisodeQueue):
    """Episodes this node may start, taken through the run's claims (see the module docstring)."""

    def __init__(
        self,
        pool: Pool,
        final: set[str],
        *,
        log: Callable[[str], None],
        noticed: threading.Event,
        state: Callable[[], dict[str, Any]],
    ) -> None:
        super().__init__()
        self.pool, self.final, self.log, self.noticed = pool, final, log, noticed
        self.state_of = state
        self.taken_by: dict[str, str] = {}  # episode -> the holder it was taken under
        self.closed = False
        self.joined = False
        self.state: dict[str, Any] = {}
        self.synced = 0  # pool.done_order entries copied into `final`
        self.first: float | None = None  # the run's first start, as POSIX seconds
        self._stop = threading.Event()
        self._outage = False
        self.taken = 0

    def read_history(
        self,
        store: Store,
        layout: RunLayout,
        order: list[str],
        *,
        node: str,
        now: datetime,
        pool: ThreadPoolExecutor,
        extra_events: Iterable[Event] = (),
    ) -> hist.History:
        """Join the pool; the earlier incarnations come from its leases, not from the events."""
        history = read_pool_history(
            self.pool,
            store,
            layout,
            order,
            node=node,
            now=now,
            executor=pool,
            extra_events=extra_events,
            state=self.state_of(),
        )
        self.joined = True
        first = self.pool.view.summary.first if self.pool.view is not None else ""
        try:
            self.first = parse_time(first).timestamp() if first else utc_now().timestamp()
        except RecordError:
            self.first = utc_now().timestamp()
        for problem in self.pool.problems[:5]:
            self.log(f"pool: {problem}")
        return history

    def extend(self, episodes: Iterable[str]) -> None:
        """Start renewing; `episodes` (those without a result) are taken through claims, not queued."""
        del episodes
        self._sync()
        threading.Thread(target=self._ticker, name="claims", daemon=True).start()

    def _sync(self) -> None:
        order = self.pool.done_order
        for i in order[self.synced :]:
            self.final.add(self.pool.episodes[i])
        self.synced = len(order)

    def _ticker(self) -> None:
        while not self._stop.wait(TICK_S):
            with contextlib.suppress(RuntimeError):  # the loop's dicts changed meanwhile: keep the last
                self.state = self.state_of()
            try:
                self.pool.tick(self.state)
                if self._outage:
                    self.log("pool: the store answers again")
                self._outage = False
            except StoreError as exc:
                if not self._outage:
                    self.log(f"pool: renewing the lease: {exc}; retrying")
                self._outage = True

    def fill(self, free: int) -> None:
        self.state = self.state_of()
        if self.closed or free <= len(self.local):
            return
        try:
            got = self.pool.take(free - len(self.local))
        except StoreError as exc:
            self.pool.note_trouble()
            self.log(f"pool: taking episodes: {exc}; retrying")
            return
        self.taken += len(got)
        holder = self.pool.holder
        queued = set(self.local)
        for episode in got:
            self.taken_by[episode] = holder
            if episode not in self.final and episode not in queued:
                self.local.append(episode)
                queued.add(episode)
        self._sync()

    def __bool__(self) -> bool:
        return bool(self.local)

    def finished(self, episode: str) -> None:
        self.pool.finished(episode)
        self._sync()

    def clear(self) -> None:
        """A notice or a stop: start nothing more (what we hold is taken over once we are gone)."""
        self.local.clear()
        self.closed = True

    def remaining_elsewhere(self) -> bool:
        """Episodes without a known result that another node holds (a node may be lost: wait)."""
        return bool(self.pool.waiting_on())

    def close(self, state: Mapping[str, Any] | None = None) -> None:
        self.closed = True
        self._stop.set()
        if not self.joined:
            return
        try:
            self.pool.release(dict(state or self.state_of()))
        except StoreError as exc:
            self.log(f"pool: ending the lease: {exc}; other nodes take over after its expiry")

    def run_wide(self, mine_s: float, my_cost: float | None) -> tuple[float | None, float | None]:
        seconds, cost = self.pool.others_totals()
        return seconds + mine_s, None if my_cost is None or cost is None else cost + my_cost

    def runtime_s(self) -> float | None:
        return None if self.first is None else max(0.0, utc_now().timestamp() - self.first)

    def holder(self) -> str | None:
        return self.pool.holder

    def holder_of(self, episode: str) -> str | None:
        return self.taken_by.get(episode, self.pool.holder)

    def standing(self, episode: str, holder: str | None) -> str:
        return self.pool.standing(episode, holder)

    def heir(self, holder: str | None, episode: str) -> str | None:
        return self.pool.heir(holder, episode)

    def startable(self) -> bool:
        return not self.pool.enabled or self.pool.valid()

    def epoch(self) -> int:
        return self.pool.epoch

    def gate(self) -> Gate:
        return self

    def keeps(self, item: Item) -> bool:
        episode = str(item.payload.get("episode_id", ""))
        return item.kind != ATTEMPT or not item.holder or self.standing(episode, item.holder) != LOST

    def has_result(self, episode: str) -> bool:
        i = self.pool.index.get(episode)
        return i is not None and i in self.pool.done

    # the Gate of this node's attempt writes (spoteval/agent/uploader.py)

    def verdict(self, item: Item) -> str:
        standing = self.standing(str(item.payload.get("episode_id", "")), item.holder or None)
        return {OWN: WRITE, WAIT: HOLD}.get(standing, GIVE_UP)

    def written(self, item: Item, ruled: float) -> None:
        took = time.monotonic() - ruled
        if took >= self.pool.plan.expiry_s / 2:
            self.log(
                f"pool: the attempt of {item.payload.get('episode_id')} reached the store {took:.1f} s "
                "after its lease was last confirmed: another node may have run it again"
            )


@dataclass(frozen=True)
class PoolSettings:
    """The config's `pool` section: this node is one of several that share the run."""

    batch: int = 16
    renew_s: float = 10.0
    expiry_s: float = 45.0
    #: the node's own group, scaled to zero by the node that finds the run done (agent/scale_zero.py)
    scale_to_zero: ScaleTarget | None = None

    def claims(self) -> dict[str, float]:
        """The claims' parameters (what a pool node's `start` event records)."""
        return {"batch": self.batch, "renew_s": self.renew_s, "expiry_s": self.expiry_s}


def parse_pool(raw: object) -> PoolSettings | None:
    """`{"batch": 16, "renew_s": 10, "expiry_s": 45}` (each optional); ValueError names the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"must be a JSON object, got {raw!r}")
    unknown = sorted(set(raw) - {"batch", "renew_s", "expiry_s", "scale_to_zero"})
    if unknown:
        raise ValueError(f"unknown key {', '.join(unknown)}")
    batch = raw.get("batch", 16)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch: must be an integer >= 1, got {batch!r}")
    values: dict[str, float] = {}
    for key, default in (("renew_s", 10.0), ("expiry_s", 45.0)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{key}: must be a number > 0, got {value!r}")
        values[key] = float(value)
    if values["expiry_s"] < 2 * values["renew_s"]:
        raise ValueError(
            f"expiry_s: must be at least twice renew_s ({values['renew_s']:g}), got {values['expiry_s']:g}"
        )
    try:
        target = parse_target(raw.get("scale_to_zero"))
    except ValueError as exc:
        raise ValueError(f"scale_to_zero: {exc}") from None
    return PoolSettings(batch, values["renew_s"], values["expiry_s"], target)


class AgentView(Protocol):
    """What the queue reads of the agent (spoteval.agent.loop.Agent)."""

    config: AgentConfig
    store: Store
    order: list[str]
    incarnation: str
    final: set[str]
    failures: dict[str, int]
    next_n: dict[str, int]
    log: Callable[[str], None]
    noticed: threading.Event
    pending: EpisodeQueue
    price: Price
    started_wall: datetime
    billed_from: datetime
    notice: Notice | None
    stop: Stop | None

    @property
    def up(self) -> Uploader: ...

    def _in_flight_detail(self) -> list[list[Any]]: ...
    def _counts(self) -> dict[str, int]: ...
    def _mine_s(self) -> float: ...
    def _uptime_s(self) -> float: ...
    def _cost(self) -> float | None: ...


def figures(agent: AgentView) -> tuple[float, float | None, float | None]:
    """(node time or wall time for max_runtime, money for the budget, this node's own part of that
    money or None) that the stop rules compare: this node's view of the run for a lone node; the
    whole pool's in a pool (every node's money, and the wall time since the run's first start)."""
    runtime = agent.pending.runtime_s()
    if runtime is None:
        return agent._uptime_s(), agent._cost(), None
    mine_s, price = agent._mine_s(), agent.price.per_hour
    own = None if price is None else price * mine_s / 3600.0
    _, cost = agent.pending.run_wide(mine_s, own)
    return runtime, cost, own


def queue_for(agent: AgentView) -> EpisodeQueue:
    """The queue the loop dispatches from: claims when the config has a `pool` section."""
    config = agent.config
    if config.pool is None:
        return EpisodeQueue()
    settings = config.pool
    pool = Pool(
        agent.store,
        config.run_id,
        agent.order,
        config.node.id,
        agent.incarnation,
        batch=settings.batch,
        renew_s=settings.renew_s,
        expiry_s=settings.expiry_s,
        log=lambda message: agent.log(f"pool: {message}"),
    )
    pool.check = takeover_check(
        pool,
        agent.store,
        lambda: agent.up,
        Book(agent.final, agent.failures, agent.next_n),
        incarnation=agent.incarnation,
        max_attempts=config.episodes.max_attempts,
        log=agent.log,
    )

    return ClaimQueue(
        pool,
        agent.final,
        log=agent.log,
        noticed=agent.noticed,
        state=lambda: lease_state(agent),
    )


def lease_state(agent: AgentView) -> dict[str, Any]:
    """What a node's lease carries: enough for a start (and the report) without the event history."""
    mine_s, price = agent._mine_s(), agent.price.per_hour
    totals = {"billed_s": round(mine_s, 3)}
    if price is not None:
        totals["cost"] = round(price * mine_s / 3600.0, 6)
    return {
        "incarnation": agent.incarnation,
        "started": format_time(agent.started_wall),
        "billed_from": format_time(agent.billed_from),
        "heartbeat_s": agent.config.heartbeat_s,
        "price": price,
        "in_flight": agent._in_flight_detail(),
        "counts": agent._counts(),
        "notice": None if agent.notice is None else agent.notice.reason,
        "stop": None if agent.stop is None else agent.stop.reason,
        "totals": totals,
    }
