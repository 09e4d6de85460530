"""One node's side of the claims protocol: join, take episodes, renew, watch, take over, steal, leave.

`Pool` is used from one thread for `take`/`finished`, and from any thread for `tick`; a lock keeps
its state consistent (`standing` reads without it). Every store call may raise `StoreError`: the
caller retries later (nothing is half-done: each step is one create-only write, replayed from the
record if it is repeated). Times for expiry come from `clock` (monotonic, this node's own): no wall
clock of another node is ever compared with ours (see the package docstring). The parts: this file
(joining, this node's lease, chunk logs), spoteval/claims/watch.py (the other holders),
spoteval/claims/taking.py (taking episodes, takeovers, the standing of this node's attempts).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from spoteval.claims.io import StoreLike, create, first_missing
from spoteval.claims.model import (
    ChunkLog,
    Entry,
    Lease,
    Plan,
    PoolLayout,
    holder_id,
    in_ranges,
    loads_object,
    manifest_digest,
    parse_entry,
    to_ranges,
)
from spoteval.claims.summary import StartView, read_start, register, write_summary
from spoteval.claims.takeover import Check, Takeover, results_check
from spoteval.claims.taking import Taking
from spoteval.claims.watch import Watch, Watching
from spoteval.record import RecordError, format_time, utc_now
from spoteval.store import StoreError

DEFAULT_RENEW_S: Final = 10.0
DEFAULT_EXPIRY_S: Final = 45.0


class Pool(Watching, Taking):
    def __init__(
        self,
        store: StoreLike,
        run_id: str,
        episodes: Sequence[str],
        node: str,
        incarnation: str,
        *,
        batch: int = 16,
        renew_s: float = DEFAULT_RENEW_S,
        expiry_s: float = DEFAULT_EXPIRY_S,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda message: None,
        check: Check | None = None,
    ) -> None:
        self.store, self.layout = store, PoolLayout(run_id)
        self.episodes = list(episodes)
        self.index = {e: i for i, e in enumerate(self.episodes)}
        self.node, self.incarnation = node, incarnation
        self.generation = 1
        self.holder = holder_id(node, incarnation)
        self.wanted = Plan(
            len(self.episodes),
            max(1, batch),
            renew_s,
            max(expiry_s, 2 * renew_s),
            manifest_digest(self.episodes),
        )
        self.plan = self.wanted
        self.clock, self.log = clock, log
        self.lock = threading.RLock()
        self.k = -1  # our latest lease index
        self.renewed = -math.inf  # our clock when our latest successful renewal began
        self.enabled = True  # False: the plan is unusable; every node runs every episode (today's way)
        self.done: set[int] = set()
        self.done_order: list[int] = []  # every index of `done`, in the order it became known
        self.ready: deque[int] = deque()
        self.logs: dict[int, ChunkLog] = {}
        self.frontier = 0  # chunks < frontier are claimed, and their entry 0 is in `logs` or complete
        self.watched: dict[str, Watch] = {}
        self.unmarked: set[int] = set()  # chunks with results of ours not yet in a `done` entry
        self.problems: list[str] = []
        self.registry_hint = 0
        self.view: StartView | None = None
        self.base_totals: dict[str, float] = {}  # ended holders, from the summary read at join
        self.billing: dict[str, dict[str, float]] = {}  # other holders since our join: latest totals
        self.registry_next = 0
        self.takeovers: list[tuple[str, list[str]]] = []  # (ended holder, episodes taken from it)
        self.last_refresh = -math.inf  # our clock when the logs others owe were last read
        self.last_steal = -math.inf
        self.counts = {"claimed": 0, "started": 0, "stolen": 0, "taken_over": 0, "expired": 0, "conflicts": 0}
        #: a takeover is checked before its entry is written (spoteval/claims/takeover.py)
        self.check: Check = check or results_check(store, run_id)
        self.joined = False
        self.trouble = -math.inf  # our clock when a store call of ours last failed (see watch.py)
        self.own_old: set[str] = set()
        self.reclaiming: set[str] = set()
        self.adopted: dict[tuple[str, int], str] = {}
        self.recheck: list[Takeover] = []
        self.epoch = 0

    # --- joining -----------------------------------------------------------------------------

    def join(self, results: Iterable[str], state: Mapping[str, Any] | None = None) -> StartView:
        """Read what a start needs, register, write lease 0, and end this node's older holders."""
        with self.lock:
            self._add_done(self.index[e] for e in results if e in self.index)
            self._read_plan()
            view = read_start(self.store, self.layout)
            self.problems.extend(view.problems)
            self.view = view
            self.registry_hint = self.registry_next = view.summary.holders
            self.base_totals = dict(view.summary.totals)
            for holder, lease in view.leases.items():
                self._bill(holder, lease)
            self._register()
            self._renew(dict(state or {}))
            if not self.enabled:
                return view
            hint = min(view.summary.frontier, self.plan.chunks)
            self.frontier = first_missing(lambda c: self.store.exists(self.layout.chunk(c, 0)), hint)
            for c in range(self.frontier):
                if any(i not in self.done for i in self.plan.span(c)):
                    self._read_log(c)
            for holder, lease in view.leases.items():
                if holder == self.holder:
                    continue
                if lease.node == self.node:  # an earlier incarnation of this node: over for sure
                    # its episodes come back to us first (what it had started stays started, and
                    # our start records its attempts), then its lease ends
                    self.own_old.add(holder)
                    self._reclaim(holder)
                    if not self._end_other(holder, lease.k, "replaced"):
                        self.problems.append(f"holder {holder} of this node renewed: two agents of one node?")
                else:
                    self.watched.setdefault(holder, Watch(lease.k, self.clock(), self.clock()))
            for chunk in list(self.logs.values()):
                self._discover(chunk)
            view.summary.frontier = self.frontier
            write_summary(self.store, self.layout, view.summary)
            self.joined = True
            return view

    def _read_plan(self) -> None:
        wanted = Plan(**{**self.wanted.__dict__, "created": format_time(utc_now()), "by": self.holder})
        created, data = create(self.store, self.layout.plan, {**wanted.to_json(), "nonce": self.holder})
        if created:
            self.plan = wanted
            return
        try:
            plan = Plan.from_json(loads_object(data or b""))
        except RecordError as exc:
            self._disable(f"{self.layout.plan}: {exc}")
            return
        if plan.manifest_sha256 != self.wanted.manifest_sha256 or plan.episodes != len(self.episodes):
            self._disable(f"{self.layout.plan}: written for another manifest")
            return
        self.plan = plan

    def _disable(self, problem: str) -> None:
        self.problems.append(f"{problem}; claims are off: this node runs every episode without a result")
        self.log(self.problems[-1])
        self.enabled = False
        self.ready = deque(i for i in range(len(self.episodes)) if i not in self.done)

    def _register(self) -> None:
        self.registry_hint = register(
            self.store,
            self.layout,
            self.holder,
            self.node,
            time=format_time(utc_now()),
            hint=self.registry_hint,
        )

    # --- leases ------------------------------------------------------------------------------

    def _renew(self, state: dict[str, Any]) -> bool:
        began = self.clock()
        lease = Lease(
            self.holder, self.k + 1, self.node, format_time(utc_now()), state, nonce=uuid.uuid4().hex
        )
        created, data = create(self.store, self.layout.lease(self.holder, lease.k), lease.to_json())
        if created:
            self.k, self.renewed = lease.k, began
            return True
        self._fence(data, state)
        return False

    def _fence(self, data: bytes | None, state: dict[str, Any]) -> None:
        """Our next lease exists and is not ours: another node ended our lease. Every claim of this
        holder is void; rejoin as a new holder, and take back what nobody else took over yet
        (`_reclaim`): the agent keeps those attempts, and gives up the others (see takeover.py)."""
        by = "?"
        with contextlib.suppress(RecordError):
            by = str(Lease.from_json(loads_object(data or b"")).by)
        self.problems.append(f"holder {self.holder} was ended by {by}: its claims are given up")
        self.log(self.problems[-1])
        old = self.holder
        self.watched[old] = Watch(self.k + 1, self.clock(), self.clock(), ended=True)
        self.ready.clear()
        self.generation += 1
        self.holder = holder_id(self.node, self.incarnation, self.generation)
        self.k = -1
        self.counts["fenced"] = self.counts.get("fenced", 0) + 1
        self.own_old.add(old)
        self.reclaiming.add(old)
        self.epoch += 1
        self._register()
        self._renew(state)
        if self.enabled:
            self._reclaim(old)

    def valid(self) -> bool:
        """Our claims may be used: the last renewal began less than half the expiry ago (others wait a
        full expiry from when they saw it, on their own clocks)."""
        return self.clock() - self.renewed < self.plan.expiry_s / 2

    def tick(self, state: Mapping[str, Any] | None = None) -> None:
        """Renew our lease when due, take back what an ended holder of ours still owns, and check the
        holders we watch; call about every second."""
        with self.lock:
            try:
                now = self.clock()
                if now - self.renewed >= self.plan.renew_s:
                    self._renew(dict(state or {}))
                if self.enabled:
                    self._reclaim_pending()
                    self._mark_done()
                    self._tail_registry()
                    self._watch(now)
                    if self.frontier >= self.plan.chunks and now - self.last_refresh >= self.plan.renew_s / 2:
                        self._refresh()
            except StoreError:
                self.trouble = self.clock()
                raise

    def note_trouble(self) -> None:
        """A store call of ours failed elsewhere (the caller's `take`): expiry waits start again."""
        self.trouble = self.clock()

    def _refresh(self) -> None:
        """At the end: read what is new in the logs of chunks others still owe (steals, dones)."""
        self.last_refresh = self.clock()
        for c in sorted(self.logs):
            chunk = self.logs[c]
            if any(
                o is not None and o != self.holder and self._index(chunk, i) not in self.done
                for i, o in enumerate(chunk.owner)
            ):
                self._read_log(c)

    def release(self, state: Mapping[str, Any] | None = None) -> None:
        """End our lease ourselves: whatever we still own can be taken over at once."""
        with self.lock:
            if self.enabled:
                self._mark_done(partial=True)
            lease = Lease(
                self.holder,
                self.k + 1,
                self.node,
                format_time(utc_now()),
                dict(state or {}),
                end="released",
                by=self.holder,
                nonce=uuid.uuid4().hex,
            )
            created, _ = create(self.store, self.layout.lease(self.holder, lease.k), lease.to_json())
            if created:
                self.k = lease.k
            self.ready.clear()
            if self.enabled:  # fold ourselves (and whoever else ended) into the next summary
                view = read_start(self.store, self.layout)
                view.summary.frontier = max(view.summary.frontier, self.frontier)
                write_summary(self.store, self.layout, view.summary)

    # --- chunk logs --------------------------------------------------------------------------

    def _index(self, chunk: ChunkLog, offset: int) -> int:
        return chunk.c * self.plan.batch + offset

    def _read_log(self, c: int) -> ChunkLog:
        """Read the entries of chunk c that we have not seen yet."""
        chunk = self.logs.get(c)
        if chunk is None:
            chunk = self.logs[c] = ChunkLog(c, len(self.plan.span(c)))
        while True:
            key = self.layout.chunk(c, chunk.length)
            data = self.store.get(key)
            if data is None:
                return chunk
            self._apply(chunk, *parse_entry(data, key), adopt=True)

    def _apply(
        self, chunk: ChunkLog, entry: Entry | None, problem: str | None, *, adopt: bool = False
    ) -> None:
        """Replay an entry. `adopt`: an entry read back that we wrote ourselves (a write whose reply was
        lost, then retried): what it started is ours to run; a takeover of another holder's episodes
        is checked again before any of them runs (`recheck`)."""
        before = list(chunk.owner)
        self._replay(chunk, entry, problem)
        if not adopt or entry is None or entry.holder != self.holder:
            return
        if entry.op == "takeover" and entry.source not in self.own_old:
            moved = tuple(
                o
                for o, (was, now) in enumerate(zip(before, chunk.owner, strict=True))
                if was != now and now == self.holder
            )
            episodes = tuple(self.episodes[self._index(chunk, o)] for o in moved)
            self.recheck.append(Takeover(chunk.c, entry.source, moved, episodes, read_back=True))
            return
        if entry.op != "done":
            queued = self.done | set(self.ready)
            mine = [o for o in in_ranges(entry.ranges, chunk.size) if chunk.owner[o] == self.holder]
            self.ready.extend(
                i for o in mine if chunk.started[o] and (i := self._index(chunk, o)) not in queued
            )

    def _replay(self, chunk: ChunkLog, entry: Entry | None, problem: str | None) -> None:
        before = len(chunk.problems)
        chunk.apply(entry, problem)
        if len(chunk.problems) > before:
            self.problems.extend(chunk.problems[before:])
            self.log(chunk.problems[-1])
        if entry is not None and entry.op == "done":
            self._add_done(self._index(chunk, o) for o, done in enumerate(chunk.complete) if done)

    def _add_done(self, indices: Iterable[int]) -> None:
        for i in indices:
            if i not in self.done:
                self.done.add(i)
                self.done_order.append(i)

    def _append(self, c: int, op: str, offsets: Iterable[int] = (), source: str | None = None) -> bool:
        """Append an entry to chunk c's log; False when another node's entry took that place first
        (it is read, and the caller decides again)."""
        chunk = self.logs.get(c) or ChunkLog(c, len(self.plan.span(c)))
        entry = Entry(
            op,
            self.holder,
            self.node,
            to_ranges(offsets),
            source,
            max(0, self.k),
            format_time(utc_now()),
            uuid.uuid4().hex,
        )
        created, data = create(self.store, self.layout.chunk(c, chunk.length), entry.to_json())
        self.logs[c] = chunk
        if created:
            self._apply(chunk, entry, None)
            return True
        self.counts["conflicts"] += 1
        key = self.layout.chunk(c, chunk.length)
        self._apply(chunk, *parse_entry(data or b"", key), adopt=True)
        self._read_log(c)
        self._discover(chunk)
        return False

    # --- the end -----------------------------------------------------------------------------

    def waiting_on(self) -> set[str]:
        """Holders that own episodes without a known result (empty: nothing left that we know of)."""
        with self.lock:
            return self._owing()

    def exhausted(self) -> bool:
        """Nothing is ours to start, and every chunk is claimed: what is left runs elsewhere."""
        with self.lock:
            return not self.ready and (not self.enabled or self.frontier >= self.plan.chunks)
