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

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from spoteval.claims import Pool
from spoteval.record import RecordError, parse_time, utc_now
from spoteval.store import StoreError

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


class ClaimQueue(EpisodeQueue):
    """Episodes this node may start, taken through the run's claims (see the module docstring)."""

    def __init__(
        self,
        pool: Pool,
        final: set[str],
        *,
        log: Callable[[str], None],
        noticed: threading.Event,
    ) -> None:
        super().__init__()
        self.pool, self.final, self.log, self.noticed = pool, final, log, noticed
        self.closed = False
        self.joined = False
        self.state: dict[str, Any] = {}
        self.synced = 0  # pool.done_order entries copied into `final`
        self.first: float | None = None  # the run's first start, as POSIX seconds
        self._stop = threading.Event()
        self._outage = False
        self.taken = 0

    def extend(self, episodes: Iterable[str]) -> None:
        """Join the pool; `episodes` (those without a result) are taken through claims, not queued."""
        del episodes
        backoff = 0.5
        while not self.joined:
            try:
                view = self.pool.join(self.final, self.state)
            except StoreError as exc:
                if self.noticed.is_set():
                    raise
                self.log(f"joining the pool: {exc}; retrying in {backoff:.1f} s")
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)
                continue
            self.joined = True
            first = view.summary.first
            try:
                self.first = parse_time(first).timestamp() if first else utc_now().timestamp()
            except RecordError:
                self.first = utc_now().timestamp()
            for problem in self.pool.problems[:5]:
                self.log(f"pool: {problem}")
            self._sync()
        threading.Thread(target=self._ticker, name="claims", daemon=True).start()

    def _sync(self) -> None:
        order = self.pool.done_order
        for i in order[self.synced :]:
            self.final.add(self.pool.episodes[i])
        self.synced = len(order)

    def _ticker(self) -> None:
        while not self._stop.wait(TICK_S):
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
        if self.closed or free <= len(self.local):
            return
        try:
            got = self.pool.take(free - len(self.local))
        except StoreError as exc:
            self.log(f"pool: taking episodes: {exc}; retrying")
            return
        self.taken += len(got)
        self.local.extend(e for e in got if e not in self.final)
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
            self.pool.release(dict(state or self.state))
        except StoreError as exc:
            self.log(f"pool: ending the lease: {exc}; other nodes take over after its expiry")

    def run_wide(self, mine_s: float, my_cost: float | None) -> tuple[float | None, float | None]:
        seconds, cost = self.pool.others_totals()
        return seconds + mine_s, None if my_cost is None or cost is None else cost + my_cost

    def runtime_s(self) -> float | None:
        return None if self.first is None else max(0.0, utc_now().timestamp() - self.first)
