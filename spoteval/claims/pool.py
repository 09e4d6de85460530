"""One node's side of the claims protocol: join, take episodes, renew, watch, take over, steal, leave.

`Pool` is used from one thread for `take`/`finished`, and from any thread for `tick`; a lock keeps
its state consistent. Every store call may raise `StoreError`: the caller retries later (nothing
is half-done: each step is one create-only write, replayed from the record if it is repeated).
Times for expiry come from `clock` (monotonic, this node's own): no wall clock of another node is
ever compared with ours (see the package docstring).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
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
from spoteval.claims.summary import StartView, latest_lease, read_start, register, write_summary
from spoteval.record import RecordError, RunLayout, format_time, utc_now

DEFAULT_RENEW_S: Final = 10.0
DEFAULT_EXPIRY_S: Final = 45.0


@dataclass
class Watch:
    """Another holder as this node sees it: its latest lease index and when we first saw that."""

    k: int
    seen: float  # our clock, when lease k was first seen by us
    polled: float
    ended: bool = False


class Pool:
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
    ) -> None:
        self.store, self.layout, self.results = store, PoolLayout(run_id), RunLayout(run_id)
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
                    self._end_other(holder, lease.k, "replaced")
                else:
                    self.watched.setdefault(holder, Watch(lease.k, self.clock(), self.clock()))
            for chunk in list(self.logs.values()):
                self._discover(chunk)
            view.summary.frontier = self.frontier
            write_summary(self.store, self.layout, view.summary)
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
        self._fence(data)
        return False

    def _fence(self, data: bytes | None) -> None:
        """Our next lease exists and is not ours: another node ended our lease. Every claim of this
        holder is void; rejoin as a new holder (the old one's episodes are taken over like any other)."""
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
        self._register()
        self._renew({})

    def _bill(self, holder: str, lease: Lease) -> None:
        """Count the holder's bill from its lease (every other holder that ran since our join)."""
        if holder.startswith(self._mine):
            return
        totals = lease.state.get("totals")
        known = self.billing.setdefault(holder, {})
        if isinstance(totals, dict):
            known.update(
                {
                    str(k): float(v)
                    for k, v in totals.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)
                }
            )

    @property
    def _mine(self) -> str:
        return holder_id(self.node, self.incarnation)

    def others_totals(self) -> tuple[float, float]:
        """(billed seconds, cost) of every other holder of the run, as far as we know now."""
        with self.lock:
            seconds = self.base_totals.get("billed_s", 0.0)
            cost = self.base_totals.get("cost", 0.0)
            for totals in self.billing.values():
                seconds += totals.get("billed_s", 0.0)
                cost += totals.get("cost", 0.0)
            return seconds, cost

    def _tail_registry(self) -> None:
        """Holders that joined since we last looked: watch them and count their bill."""
        while True:
            data = self.store.get(self.layout.holder(self.registry_next))
            if data is None:
                return
            self.registry_next += 1
            try:
                holder = str(loads_object(data)["holder"])
            except (RecordError, KeyError) as exc:
                self.problems.append(f"{self.layout.holder(self.registry_next - 1)}: {exc}")
                continue
            if holder.startswith(self._mine) or holder in self.billing:
                continue
            lease, problem = latest_lease(self.store, self.layout, holder, 0)
            if problem:
                self.problems.append(problem)
            if lease is None:
                continue
            self._bill(holder, lease)
            if holder not in self.watched:
                now = self.clock()
                self.watched[holder] = Watch(lease.k, now, now, ended=lease.end is not None)

    def valid(self) -> bool:
        """Our claims may be used: the last renewal began less than half the expiry ago (others wait a
        full expiry from when they saw it, on their own clocks)."""
        return self.clock() - self.renewed < self.plan.expiry_s / 2

    def tick(self, state: Mapping[str, Any] | None = None) -> None:
        """Renew our lease when due, and check the holders we watch; call about every second."""
        with self.lock:
            now = self.clock()
            if now - self.renewed >= self.plan.renew_s:
                self._renew(dict(state or {}))
            if self.enabled:
                self._mark_done()
                self._tail_registry()
                self._watch(now)
                if self.frontier >= self.plan.chunks and now - self.last_refresh >= self.plan.renew_s / 2:
                    self._refresh()

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
                self._mark_done()
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

    # --- watching others ---------------------------------------------------------------------

    def _discover(self, chunk: ChunkLog) -> None:
        for entry in chunk.entries:
            if entry is None or entry.holder == self.holder or entry.holder in self.watched:
                continue
            lease, problem = latest_lease(self.store, self.layout, entry.holder, entry.lease)
            if problem:
                self.problems.append(problem)
            now = self.clock()
            k = lease.k if lease is not None else -1
            self.watched[entry.holder] = Watch(k, now, now, ended=lease is not None and lease.end is not None)

    def _owing(self) -> set[str]:
        """Holders that own episodes without a known result."""
        out: set[str] = set()
        for chunk in self.logs.values():
            for offset, owner in enumerate(chunk.owner):
                if owner is not None and owner != self.holder and self._index(chunk, offset) not in self.done:
                    out.add(owner)
        return out

    def _watch(self, now: float) -> None:
        billed = {h for h in self.billing if h in self.watched}
        for holder in sorted(self._owing() | billed):
            w = self.watched.get(holder)
            if w is None or w.ended or now - w.polled < self.plan.renew_s / 2:
                continue
            w.polled = now
            while True:
                data = self.store.get(self.layout.lease(holder, w.k + 1))
                if data is None:
                    break
                w.k, w.seen = w.k + 1, now
                try:
                    lease = Lease.from_json(loads_object(data))
                    if holder in self.billing:
                        self._bill(holder, lease)
                    if lease.end is not None:
                        w.ended = True
                        break
                except RecordError as exc:
                    self.problems.append(f"{self.layout.lease(holder, w.k)}: {exc}")
            if not w.ended and now - w.seen >= self.plan.expiry_s:
                self._end_other(holder, w.k, "expired", waited=now - w.seen)

    def _end_other(self, holder: str, k: int, reason: str, waited: float = 0.0) -> bool:
        """Write the end of another holder's lease at k + 1 (create-only). True once it has ended."""
        w = self.watched.setdefault(holder, Watch(k, self.clock(), self.clock()))
        end = Lease(
            holder,
            k + 1,
            self.node,
            format_time(utc_now()),
            {"waited_s": round(waited, 3)},
            end=reason,
            by=self.holder,
            nonce=uuid.uuid4().hex,
        )
        created, data = create(self.store, self.layout.lease(holder, k + 1), end.to_json())
        if created:
            w.k, w.ended = k + 1, True
            self.counts["expired"] += 1
            self.log(
                f"lease of {holder} ended ({reason}, silent {waited:.1f} s): its episodes can be taken over"
            )
            return True
        try:
            other = Lease.from_json(loads_object(data or b""))
            w.k, w.seen = k + 1, self.clock()
            w.ended = other.end is not None
        except RecordError:
            w.k, w.seen = k + 1, self.clock()
        return w.ended

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
        lost, then retried): what it started is ours to run."""
        self._replay(chunk, entry, problem)
        if adopt and entry is not None and entry.holder == self.holder and entry.op != "done":
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

    # --- taking episodes ---------------------------------------------------------------------

    def finished(self, episode: str) -> None:
        """The episode has a result in the store (ours or another node's). Once every episode we own
        in its chunk has one, a `done` entry says so (written by the next `take` or `tick`)."""
        with self.lock:
            i = self.index.get(episode)
            if i is not None:
                self._add_done([i])
                self.unmarked.add(self.plan.chunk_of(i))

    def _mark_done(self) -> None:
        for c in sorted(self.unmarked):
            chunk = self.logs.get(c)
            if chunk is None:
                self.unmarked.discard(c)
                continue
            mine = chunk.owned_by(self.holder)
            if not mine or (
                all(self._index(chunk, o) in self.done for o in mine) and self._append(c, "done", mine)
            ):
                self.unmarked.discard(c)

    def take(self, n: int) -> list[str]:
        """Up to n episodes this node may start now, each owned by it in the record."""
        with self.lock:
            out: list[int] = []
            if not self.enabled:
                while self.ready and len(out) < n:
                    out.append(self.ready.popleft())
                return [self.episodes[i] for i in out]
            self._mark_done()
            while len(out) < n and self.valid():
                if self.ready:
                    i = self.ready.popleft()
                    if i not in self.done:
                        out.append(i)
                    continue
                need = n - len(out)
                if not (self._start_own(need) or self._take_over() or self._claim(need) or self._steal()):
                    break
            self.counts["started"] += len(out)
            return [self.episodes[i] for i in out]

    def _reserve(self, need: int) -> int:
        return max(need, math.ceil(self.plan.batch / 4))

    def _start_own(self, need: int) -> bool:
        for c in sorted(self.logs):
            chunk = self.logs[c]
            offsets = [o for o in chunk.unstarted(self.holder) if self._index(chunk, o) not in self.done]
            if not offsets:
                continue
            chosen = offsets[: self._reserve(need)]
            if self._append(c, "start", chosen):
                self.ready.extend(self._index(chunk, o) for o in chosen)
            return True
        return False

    def _take_over(self) -> bool:
        ended = {h for h, w in self.watched.items() if w.ended}
        for c in sorted(self.logs):
            chunk = self.logs[c]
            for source in [*sorted({o for o in chunk.owner if o in ended}), None]:
                if source is None and (chunk.length == 0 or chunk.entries[0] is not None):
                    continue  # nobody-owned offsets only where entry 0 is unreadable
                left = [o for o in chunk.owned_by(source) if self._index(chunk, o) not in self.done]
                if not left:
                    continue
                if self._append(c, "takeover", (), source):
                    self.counts["taken_over"] += 1
                    if source is not None:
                        self.takeovers.append((source, [self.episodes[self._index(chunk, o)] for o in left]))
                    for o in chunk.owned_by(self.holder):  # skip what another node already finished
                        i = self._index(chunk, o)
                        if i not in self.done and self.store.exists(self.results.result(self.episodes[i])):
                            self._add_done([i])
                    self.log(f"took over chunk {c} from {source or 'nobody (unreadable claim)'}")
                return True
        return False

    def _claim(self, need: int) -> bool:
        c = self.frontier
        if c >= self.plan.chunks:
            return False
        span = self.plan.span(c)
        todo = [i - span.start for i in span if i not in self.done]
        chosen = todo[: self._reserve(need)]
        if self._append(c, "claim", chosen):
            self.counts["claimed"] += 1
            self.ready.extend(span.start + o for o in chosen)
        self.frontier = c + 1
        return True

    def _steal(self) -> bool:
        now = self.clock()
        if now - self.last_steal < self.plan.renew_s / 2:
            return False
        self.last_steal = now
        best: tuple[int, int, str] | None = None
        for c in sorted(self.logs):
            chunk = self.logs[c]
            if not any(
                o != self.holder and o is not None and not s
                for o, s in zip(chunk.owner, chunk.started, strict=True)
            ):
                continue
            self._read_log(c)
            for owner in chunk.holders() - {self.holder}:
                left = [o for o in chunk.unstarted(owner) if self._index(chunk, o) not in self.done]
                if left and (best is None or len(left) > best[0]):
                    best = (len(left), c, owner)
        if best is None:
            return False
        _, c, owner = best
        chunk = self.logs[c]
        left = [o for o in chunk.unstarted(owner) if self._index(chunk, o) not in self.done]
        tail = left[len(left) // 2 :]
        if self._append(c, "steal", tail, owner):
            self.counts["stolen"] += len(tail)
            self.ready.extend(self._index(chunk, o) for o in tail)
            self.log(f"stole {len(tail)} episode(s) of chunk {c} from {owner}")
            return True
        self.last_steal = -math.inf  # lost the race: read again at once
        return True

    # --- the end -----------------------------------------------------------------------------

    def waiting_on(self) -> set[str]:
        """Holders that own episodes without a known result (empty: nothing left that we know of)."""
        with self.lock:
            return self._owing()

    def exhausted(self) -> bool:
        """Nothing is ours to start, and every chunk is claimed: what is left runs elsewhere."""
        with self.lock:
            return not self.ready and (not self.enabled or self.frontier >= self.plan.chunks)
