"""Taking episodes: this node's own claims, takeovers (checked, or reclaimed from this node's own
ended holders), new claims, steals; results marked done; and the standing of this node's attempts.

`Taking` is a part of `Pool` (spoteval/claims/pool.py), kept apart so that each file reads as one
concept; it declares the pool's state and steps it uses. The rules of a takeover, a reclaim and an
attempt's standing are in spoteval/claims/takeover.py.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from spoteval.claims.model import ChunkLog, Plan
from spoteval.claims.takeover import LOST, OWN, WAIT, Check, Settled, Takeover
from spoteval.claims.watch import Watch


class Taking:
    """Declares the pool's state (set by `Pool.__init__`) and steps (`Pool`'s methods) used here."""

    plan: Plan
    episodes: list[str]
    index: dict[str, int]
    holder: str
    enabled: bool
    joined: bool
    clock: Callable[[], float]
    log: Callable[[str], None]
    lock: threading.RLock
    done: set[int]
    ready: deque[int]
    logs: dict[int, ChunkLog]
    frontier: int
    watched: dict[str, Watch]
    unmarked: set[int]
    takeovers: list[tuple[str, list[str]]]
    last_steal: float
    counts: dict[str, int]
    check: Check
    own_old: set[str]  # this incarnation's own holders that ended: their episodes come back to us
    reclaiming: set[str]  # of those, the ones whose reclaim is still to be written
    adopted: dict[tuple[str, int], str]  # (old holder, episode index) -> the holder it came back to
    recheck: list[Takeover]  # takeovers of ours read back unchecked (a write whose reply was lost)
    epoch: int  # raised whenever this node's holder or what it holds changes

    def valid(self) -> bool:
        raise NotImplementedError  # Pool's

    def _index(self, chunk: ChunkLog, offset: int) -> int:
        raise NotImplementedError  # Pool's

    def _read_log(self, c: int) -> ChunkLog:
        raise NotImplementedError  # Pool's

    def _add_done(self, indices: Iterable[int]) -> None:
        raise NotImplementedError  # Pool's

    def _append(self, c: int, op: str, offsets: Iterable[int] = (), source: str | None = None) -> bool:
        raise NotImplementedError  # Pool's

    # --- results ---------------------------------------------------------------------------------

    def finished(self, episode: str) -> None:
        """The episode has a result in the store (ours or another node's). Once every episode we own
        in its chunk has one, a `done` entry says so (written by the next `take` or `tick`)."""
        with self.lock:
            i = self.index.get(episode)
            if i is not None:
                self._add_done([i])
                self.unmarked.add(self.plan.chunk_of(i))

    def _mark_done(self, *, partial: bool = False) -> None:
        """`done` entries for chunks where every episode we own has its result (`partial`, as we
        leave: for those of them that have one, so a taker need not look for them)."""
        if partial:
            self.unmarked.update(c for c, chunk in self.logs.items() if chunk.owned_by(self.holder))
        for c in sorted(self.unmarked):
            chunk = self.logs.get(c)
            if chunk is None:
                self.unmarked.discard(c)
                continue
            mine = chunk.owned_by(self.holder)
            have = [o for o in mine if self._index(chunk, o) in self.done]
            if partial and have and len(have) < len(mine):
                self._append(c, "done", have)
                self.unmarked.discard(c)
            elif not mine or (len(have) == len(mine) and self._append(c, "done", mine)):
                self.unmarked.discard(c)

    # --- taking ----------------------------------------------------------------------------------

    def take(self, n: int) -> list[str]:
        """Up to n episodes this node may start now, each owned by it in the record. A takeover is
        checked (`check`: store reads, without the lock) before its entry is written."""
        out: list[int] = []
        while True:
            with self.lock:
                if not self.enabled:
                    while self.ready and len(out) < n:
                        out.append(self.ready.popleft())
                    return [self.episodes[i] for i in out]
                self._mark_done()
                self._reclaim_pending()
                candidate = self._take_some(n, out)
            if candidate is None:
                break
            settled = self.check(candidate)
            with self.lock:
                self._take_over(candidate, settled)
        with self.lock:
            self.counts["started"] += len(out)
        return [self.episodes[i] for i in out]

    def _take_some(self, n: int, out: list[int]) -> Takeover | None:
        """Fill `out` from what is ours; stop at a takeover to check (returned) or when nothing is left."""
        while len(out) < n and self.valid():
            if self.ready:
                i = self.ready.popleft()
                if i not in self.done:
                    out.append(i)
                continue
            need = n - len(out)
            if self._start_own(need):
                continue
            candidate = self.recheck[0] if self.recheck else self._candidate()
            if candidate is not None:
                return candidate
            if not (self._claim(need) or self._steal()):
                break
        return None

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

    # --- takeovers -------------------------------------------------------------------------------

    def _candidate(self) -> Takeover | None:
        """The first chunk where an ended holder (not one of ours: those are reclaimed) owns episodes
        that the log does not mark done. All of them move with the takeover, so all are checked:
        one whose result this node knows of, but the log does not, must come over settled
        (started), or a third node that does not know of its result could steal it and run it."""
        ended = {h for h, w in self.watched.items() if w.ended} - self.own_old
        for c in sorted(self.logs):
            chunk = self.logs[c]
            for source in [*sorted({o for o in chunk.owner if o in ended}), None]:
                if source is None and (chunk.length == 0 or chunk.entries[0] is not None):
                    continue  # nobody-owned offsets only where entry 0 is unreadable
                left = chunk.owned_by(source)
                if left:
                    episodes = tuple(self.episodes[self._index(chunk, o)] for o in left)
                    return Takeover(c, source, tuple(left), episodes)
        return None

    def _take_over(self, takeover: Takeover, settled: Settled) -> None:
        """Write the takeover entry (settled episodes started, so nobody runs them again); once it is
        ours, `settled.commit(moved)` writes what the check found for the episodes it moved. The log
        changed meanwhile (another taker, or this node read newer entries while it checked): only
        what the source still owns moves, and nothing is written for the rest; another entry in
        that place: nothing is written, the next round decides again."""
        c = takeover.c
        chunk = self.logs[c]
        final = [
            o
            for o, e in zip(takeover.offsets, takeover.episodes, strict=True)
            if e in settled.final or self._index(chunk, o) in self.done
        ]
        before = list(chunk.owner)
        if takeover.read_back:  # the entry is ours already: mark the settled, queue the rest we started
            self.recheck.remove(takeover)
            mine = [o for o in takeover.offsets if chunk.owner[o] == self.holder]
            marks = [o for o in final if o in mine and not chunk.started[o]]
            if marks and not self._append(c, "start", marks):
                self.recheck.append(takeover)
                return
            queued = self.done | set(self.ready)
            self.ready.extend(
                i
                for o in mine
                if chunk.started[o] and o not in final and (i := self._index(chunk, o)) not in queued
            )
            moved = mine
        else:
            if not any(before[o] == takeover.source for o in takeover.offsets):
                return  # taken by another node meanwhile
            if not self._append(c, "takeover", final, takeover.source):
                return
            moved = [
                o for o in takeover.offsets if before[o] == takeover.source and chunk.owner[o] == self.holder
            ]
        episodes = frozenset(self.episodes[self._index(chunk, o)] for o in moved)
        self.counts["taken_over"] += 1
        self._add_done(self.index[e] for e in settled.results & episodes)
        self.unmarked.add(c)  # a `done` entry once every episode of ours there has its result
        if takeover.source is not None:
            self.takeovers.append((takeover.source, sorted(episodes)))
        settled.commit(episodes)
        left = [o for o in moved if not chunk.started[o]]
        self.log(
            f"took over chunk {c} from {takeover.source or 'nobody (unreadable claim)'}: "
            f"{len(moved) - len(left)} settled already, {len(left)} to run"
        )

    def _reclaim_pending(self) -> None:
        for old in sorted(self.reclaiming):
            self._reclaim(old)

    def _reclaim(self, old: str) -> None:
        """Take back what `old` (one of this node's own ended holders) still owns: what it started stays
        started, now ours; this node runs or records it itself (see takeover.py)."""
        for c in sorted(self.logs):
            chunk = self.logs[c]
            if old not in chunk.holders():
                continue
            chunk = self._read_log(c)
            while True:
                owned = chunk.owned_by(old)
                if not owned:
                    break
                started = [o for o in owned if chunk.started[o]]
                if self._append(c, "takeover", started, old):
                    self.unmarked.add(c)
                    for o in owned:
                        self.adopted[(old, self._index(chunk, o))] = self.holder
                    queued = self.done | set(self.ready)
                    self.ready.extend(i for o in started if (i := self._index(chunk, o)) not in queued)
                    self.counts["reclaimed"] = self.counts.get("reclaimed", 0) + len(owned)
                    break
        self.reclaiming.discard(old)
        self.epoch += 1

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

    # --- what this node's attempts may do ---------------------------------------------------------

    def heir(self, holder: str | None, episode: str) -> str:
        """The holder an attempt started under `holder` belongs to now (reclaims pass it on)."""
        if holder is None:
            return self.holder
        i = self.index.get(episode, -1)
        seen: set[str] = set()
        while (holder, i) in self.adopted and holder not in seen:
            seen.add(holder)
            holder = self.adopted[(holder, i)]
        return holder

    def standing(self, episode: str, holder: str | None) -> str:
        """OWN, WAIT or LOST for this node's attempt of `episode` started under `holder` (None: the
        current holder); read without the lock, from values other threads replace whole."""
        if not self.enabled:
            return OWN
        if not self.joined:
            return WAIT
        i = self.index.get(episode)
        if i is None:
            return OWN
        current = self.holder
        heir = self.heir(holder, episode)
        chunk = self.logs.get(self.plan.chunk_of(i))
        if chunk is None:
            return LOST if heir != current else (OWN if self.valid() else WAIT)
        owner = chunk.owner[i - chunk.c * self.plan.batch]
        if heir == current:
            if owner != current:
                return LOST  # taken: our lease has ended (we learn it at the next renewal)
            return OWN if self.valid() else WAIT
        if heir in self.own_old and owner == heir:
            return WAIT  # our own ended holder, its reclaim not yet written
        return LOST

    def state_of(self) -> dict[str, Any]:
        """For tests and logs: this node's holder and what it reclaims."""
        return {"holder": self.holder, "own_old": sorted(self.own_old), "reclaiming": sorted(self.reclaiming)}
