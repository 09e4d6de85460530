"""Watching the other holders of a pool: their leases (the expiry rule), their bills, and the end of a
lease that went silent.

`Watching` is a part of `Pool` (spoteval/claims/pool.py), kept apart so that each file reads as one
concept; it declares the pool's state and steps it uses. Expiry is measured on this node's own
monotonic clock from when it first saw a holder's latest lease, and only while the store answers
this node: a node that could not read the store itself (an outage that cut every node off alike)
starts its wait again once it can, so a store outage ends nobody's lease.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from spoteval.claims.io import StoreLike, create
from spoteval.claims.model import ChunkLog, Lease, Plan, PoolLayout, holder_id, loads_object
from spoteval.claims.summary import latest_lease
from spoteval.record import RecordError, format_time, utc_now


@dataclass
class Watch:
    """Another holder as this node sees it: its latest lease index and when we first saw that."""

    k: int
    seen: float  # our clock, when lease k was first seen by us
    polled: float
    ended: bool = False


class Watching:
    """Declares the pool's state (set by `Pool.__init__`) and steps (`Pool`'s methods) used here."""

    store: StoreLike
    layout: PoolLayout
    plan: Plan
    node: str
    incarnation: str
    holder: str
    clock: Callable[[], float]
    log: Callable[[str], None]
    lock: threading.RLock
    watched: dict[str, Watch]
    billing: dict[str, dict[str, float]]
    base_totals: dict[str, float]
    registry_next: int
    problems: list[str]
    counts: dict[str, int]
    logs: dict[int, ChunkLog]
    done: set[int]
    trouble: float  # our clock when a store call of ours last failed

    def _index(self, chunk: ChunkLog, offset: int) -> int:
        raise NotImplementedError  # Pool's

    def _read_log(self, c: int) -> ChunkLog:
        raise NotImplementedError  # Pool's

    # --- bills -------------------------------------------------------------------------------

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

    # --- leases of others --------------------------------------------------------------------

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
            # the wait counts only while the store answered us: after our own store trouble it
            # starts again (a store that cut everyone off is no sign that the holder is gone)
            silent = now - max(w.seen, self.trouble)
            if not w.ended and silent >= self.plan.expiry_s:
                self._end_other(holder, w.k, "expired", waited=silent)

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
