"""Holders, their last states, and the run-wide summaries a start reads instead of the history.

- `holders/{i}`: a prefix-closed registry, one object per holder (node incarnation), appended when
  it joins: `{"holder", "node", "time", "nonce"}`.
- `summaries/{n}`: a prefix-closed chain. Summary n+1 = summary n + the holders registered since
  and the holders that ended since, folded: `holders` (registry entries accounted for), `live`
  (holder -> the last lease index seen), `ended` (count), `totals` (the sum of every ended holder's
  final `state.totals`, e.g. billed seconds and cost), `last_by_node` (node -> its latest ended
  holder's last own lease), `first` (the time of the run's first holder), `frontier` (chunks below it
  are claimed: a start searches for the first free chunk from there). A lease ended by another node
  (`expired`, `replaced`) is that node's tombstone: its `node` is the writer's and its state has no
  totals, so the holder is folded from its own last lease, the one before.

A start reads the latest summary (O(log n) probes), the registry entries after it, and the
latest lease of each holder not yet ended: objects independent of the run's length and its number of
renewals. Summaries are written create-only; two nodes folding the same holders race for n+1 and
the loser's fold is redone by a later start: each summary is a function of the one before and of
objects that never change, so any winner is right.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spoteval.claims.io import StoreLike, create, first_missing
from spoteval.claims.model import Lease, PoolLayout, dumps, loads_object
from spoteval.record import RecordError


@dataclass
class Summary:
    n: int = 0  # summaries/{i} exist for i < n (this one is n - 1; 0: none yet)
    holders: int = 0
    live: dict[str, int] = field(default_factory=dict)
    ended: int = 0
    totals: dict[str, float] = field(default_factory=dict)
    last_by_node: dict[str, dict[str, Any]] = field(default_factory=dict)
    first: str = ""
    frontier: int = 0  # chunks below this are claimed

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "holders": self.holders,
            "live": dict(sorted(self.live.items())),
            "ended": self.ended,
            "totals": dict(sorted(self.totals.items())),
            "last_by_node": self.last_by_node,
            "first": self.first,
            "frontier": self.frontier,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], n: int) -> Summary:
        live = obj.get("live", {})
        totals = obj.get("totals", {})
        last = obj.get("last_by_node", {})
        holders = obj.get("holders", 0)
        if not isinstance(holders, int) or not isinstance(live, dict) or not isinstance(totals, dict):
            raise RecordError("holders, live or totals have the wrong type")
        return cls(
            n=n,
            holders=holders,
            live={str(h): int(k) for h, k in live.items() if isinstance(k, int)},
            ended=int(obj.get("ended", 0)),
            totals={str(k): float(v) for k, v in totals.items() if isinstance(v, int | float)},
            last_by_node=dict(last) if isinstance(last, dict) else {},
            first=str(obj.get("first", "")),
            frontier=int(obj.get("frontier", 0)),
        )

    def fold(self, lease: Lease, index: int) -> None:
        """Account for a holder whose lease has ended (its own last lease: a renewal, or its end
        `released`)."""
        self.live.pop(lease.holder, None)
        self.ended += 1
        totals = lease.state.get("totals", {})
        if isinstance(totals, dict):
            for key, value in totals.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self.totals[str(key)] = self.totals.get(str(key), 0.0) + float(value)
        previous = self.last_by_node.get(lease.node)
        if previous is None or int(previous.get("index", -1)) < index:
            self.last_by_node[lease.node] = {"index": index, **lease.to_json()}


@dataclass
class StartView:
    """What a node start needs from the pool's record."""

    summary: Summary
    leases: dict[str, Lease]  # holders not ended: their latest lease
    index: dict[str, int]  # holder -> registry index
    folded: list[str]  # holders found ended since the summary (folded into `summary`)
    problems: list[str]
    ended: dict[str, Lease] = field(default_factory=dict)  # those holders' final leases


def latest_lease(
    store: StoreLike, layout: PoolLayout, holder: str, hint: int
) -> tuple[Lease | None, str | None]:
    """The holder's latest lease (searched from the lease index `hint`), or None with a problem."""
    k = first_missing(lambda i: store.exists(layout.lease(holder, i)), max(0, hint)) - 1
    if k < 0:
        return None, f"holder {holder}: no lease"
    key = layout.lease(holder, k)
    data = store.get(key)
    if data is None:
        return None, f"{key}: vanished"
    try:
        return Lease.from_json(loads_object(data)), None
    except RecordError as exc:
        # a lease that does not parse still shows the holder renewed: keep it live at index k
        return Lease(holder=holder, k=k, node="", time=""), f"{key}: {exc}"


def own_last(store: StoreLike, layout: PoolLayout, lease: Lease) -> Lease:
    """The holder's own last lease: the one before an end written by another node (a tombstone)."""
    if lease.end is None or lease.by in (None, lease.holder) or lease.k == 0:
        return lease
    data = store.get(layout.lease(lease.holder, lease.k - 1))
    try:
        return Lease.from_json(loads_object(data or b""))
    except RecordError:
        return lease


def read_start(store: StoreLike, layout: PoolLayout) -> StartView:
    problems: list[str] = []
    n = first_missing(lambda i: store.exists(layout.summary(i)))
    summary = Summary()
    if n > 0:
        data = store.get(layout.summary(n - 1))
        try:
            summary = Summary.from_json(loads_object(data or b""), n)
        except RecordError as exc:
            problems.append(f"{layout.summary(n - 1)}: {exc}; the holders are read from the registry")
            summary = Summary(n=n)
    candidates: dict[str, int] = dict(summary.live)
    index: dict[str, int] = {}
    i = summary.holders
    while True:
        data = store.get(layout.holder(i))
        if data is None:
            break
        try:
            doc = loads_object(data)
            holder = str(doc["holder"])
            candidates.setdefault(holder, 0)
            index[holder] = i
            if i == 0 and not summary.first:
                summary.first = str(doc.get("time", ""))
        except (RecordError, KeyError) as exc:
            problems.append(f"{layout.holder(i)}: {exc}")
        i += 1
    summary.holders = i
    leases: dict[str, Lease] = {}
    ended: dict[str, Lease] = {}
    folded: list[str] = []
    for holder, hint in sorted(candidates.items()):
        lease, problem = latest_lease(store, layout, holder, hint)
        if problem:
            problems.append(problem)
        if lease is None:
            continue
        if lease.end is not None:
            summary.fold(own_last(store, layout, lease), index.get(holder, summary.holders))
            folded.append(holder)
            ended[holder] = lease
        else:
            summary.live[holder] = lease.k
            leases[holder] = lease
    return StartView(summary, leases, index, folded, problems, ended)


def register(store: StoreLike, layout: PoolLayout, holder: str, node: str, *, time: str, hint: int) -> int:
    """Append the holder to the registry; returns its index."""
    doc = {"holder": holder, "node": node, "time": time, "nonce": uuid.uuid4().hex}
    i = first_missing(lambda j: store.exists(layout.holder(j)), hint)
    while True:
        created, _ = create(store, layout.holder(i), doc)
        if created:
            return i
        i += 1


def write_summary(store: StoreLike, layout: PoolLayout, summary: Summary) -> bool:
    """Write the summary as the next of the chain; False when another node wrote that one first
    (written at each start and each orderly end, so the next start reads little after it)."""
    created = store.put_new(layout.summary(summary.n), dumps(summary.to_json()))
    if created:
        summary.n += 1
    return created
