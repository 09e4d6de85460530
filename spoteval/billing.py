"""Events -> billed intervals -> cost: the one billing model of the run record.

The agent's budget rule (spoteval/agent/history.py), the grant's spending checks (spoteval/grant.py)
and the run report (spoteval/report/) all read billed time and money through this module, so they
give the same billed seconds and cost for the same record.

The rules, per node, over its events in time order:

- A `start` opens a *stretch* (the node holding capacity). It ends at a `stop` or `preempted` event
  of the node; a `preempted` the restart measurement forced (`details.simulated`) ends it too.
- A second `start` with no end between closes the open stretch at the node's last event before it
  (the end went unrecorded), except an agent's start right after a control plane's start (the
  restart measurement's, reason `measurement`, or the operator's, `details.source: operator`), which
  is the agent starting on that node: the same stretch. A stretch the operator opened is billed from
  its start (the provider said running), or from the machine's boot where the agent's start says
  it booted earlier.
- Outside any stretch: a `preempted` whose `details.launch_time` is before it (and after the last
  stretch) bills launch -> preemption, the node taken before its agent wrote a start; a `preempted`
  after a stretch that a `stop` ended following a provider's notice moves that stretch's end to the
  preemption (the node ran until the provider took it); a `heartbeat` or `ready` opens a stretch
  (evidence of a running node). Other stray events bill nothing.
- A stretch still open at the end of the record runs to `now` when given (a check before spending),
  else to the node's last event.
- The bill begins at machine boot where the record says so: the start event's `details.billed_from`
  (the agent writes it), else, for an agent's run on a provider billed from boot, the start minus
  the ready event's `boot_to_agent_s`. A stretch that would begin before the previous one of its node
  ended begins at that end: time on one node is billed once; nodes add up.
- Money: a stretch is priced at the first price its events logged, from its start, and at each later
  different price from the event that logged it. A stretch with no logged price is unpriced: the
  grant counts it at a fallback price (the price now) or refuses, the agent at its price now, the
  report lists it as unpriced.

Standard library only (the node agent ships it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from spoteval.providers import BILLED_FROM_BOOT
from spoteval.record import Event, RecordError, parse_time

#: The `details.source` of the operator's events (spoteval.operate): its `start` opens a stretch
#: that the agent's own start on the restarted node then joins, as after a measurement's start.
OPERATOR_SOURCE: Final = "operator"
#: How a stretch ended: by one of the node's events, by the next start, or at the end of the record.
CLOSED_BY: Final = ("stop", "preempted", "simulated_preemption", "next_start", "open", "now")


class PricedTime:
    """Billed time from `start` to `end` at the logged `prices`: its length, first price and cost."""

    start: datetime
    end: datetime
    prices: tuple[tuple[datetime, float], ...]

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def price(self) -> float | None:
        """The price in force at the start (the first one logged)."""
        return self.prices[0][1] if self.prices else None

    @property
    def cost(self) -> float | None:
        """Price x billed time, following every price change logged; None without a price."""
        return priced_cost(self.start, self.end, self.prices)


@dataclass(frozen=True)
class Stretch(PricedTime):
    """One node holding capacity, as billed: from `start` (machine boot where known) to `end`."""

    node: str
    start: datetime
    end: datetime
    closed_by: str  # one of CLOSED_BY
    kind: str  # "run", or "measurement" (opened by the control plane's measurement start)
    opened_at: datetime  # the time of the event that opened it (start, launch or stray event)
    opener: Event  # the event that opened it
    events: tuple[Event, ...]  # the node's events in it, in time order, the opener first
    closer: Event | None  # the event that ended it (stop, preempted), if any
    agent_start: datetime | None  # the agent's start on a node the control plane started
    prices: tuple[tuple[datetime, float], ...]  # (logged at, price per hour), each a change
    currency: str | None
    notice: Event | None  # the first stopping notice (not a rebalance recommendation)
    provider: str | None  # the first provider its events name
    #: the bill began before the opening start event, as the record says (`billed_from`, boot time)
    from_boot: bool = False

    def segments(self) -> list[tuple[datetime, datetime, float | None]]:
        """(begin, end, price per hour) pieces of the stretch, split where the price changed."""
        return segments(self.start, self.end, self.prices)


def segments(
    start: datetime, end: datetime, prices: Sequence[tuple[datetime, float]]
) -> list[tuple[datetime, datetime, float | None]]:
    """start -> end cut where the price changed: the first price from `start`, each later one from
    when it was logged. Without prices, one unpriced piece."""
    if not prices:
        return [(start, end, None)]
    out: list[tuple[datetime, datetime, float | None]] = []
    bounds = [max(t, start) for t, _ in prices[1:]] + [end]
    begin = start
    for (_, price), bound in zip(prices, bounds, strict=True):
        until = min(max(bound, begin), end)
        out.append((begin, until, price))
        begin = until
    return out


def priced_cost(start: datetime, end: datetime, prices: Sequence[tuple[datetime, float]]) -> float | None:
    """Money for start -> end at the logged prices (see `segments`); None without a price."""
    if not prices:
        return None
    total = 0.0
    for begin, until, price in segments(start, end, prices):
        total += (price or 0.0) * (until - begin).total_seconds() / 3600.0
    return total


class _Open:
    """A stretch being walked."""

    def __init__(self, event: Event, opened_at: datetime) -> None:
        self.opener = event
        self.opened_at = opened_at
        self.kind = "measurement" if event.kind == "start" and event.reason == "measurement" else "run"
        #: opened by a control plane's start (a measurement, the operator): the agent's start joins it
        self.by_plane = self.kind == "measurement" or (
            event.kind == "start" and event.details.get("source") == OPERATOR_SOURCE
        )
        self.events: list[Event] = [event]
        self.last_seen = event.time
        self.agent_start: datetime | None = None
        self.notice: Event | None = None
        self.prices: list[tuple[datetime, float]] = []
        self.currency: str | None = None
        self._price(event)

    def _price(self, event: Event) -> None:
        if self.currency is None and event.currency is not None:
            self.currency = event.currency
        if event.price_per_hour is not None and (
            not self.prices or self.prices[-1][1] != event.price_per_hour
        ):
            self.prices.append((event.time, event.price_per_hour))

    def take(self, event: Event) -> None:
        self.events.append(event)
        self.last_seen = max(self.last_seen, event.time)
        self._price(event)
        if event.kind == "notice" and event.reason != "rebalance_recommendation" and self.notice is None:
            self.notice = event

    def close(self, end: datetime, closed_by: str, closer: Event | None, node: str) -> Stretch:
        start = self._billed_from()
        return Stretch(
            node=node,
            start=self.opened_at if start is None else start,
            end=max(end, self.opened_at),
            closed_by=closed_by,
            kind=self.kind,
            opened_at=self.opened_at,
            opener=self.opener,
            events=tuple(self.events),
            closer=closer,
            agent_start=self.agent_start,
            prices=tuple(self.prices),
            currency=self.currency,
            notice=self.notice,
            provider=self.provider,
            from_boot=start is not None,
        )

    def _billed_from_agent(self) -> datetime | None:
        """A stretch the operator opened when the provider said running: billed from there, or from
        the machine's boot where the agent that joined it says the machine booted earlier."""
        agent = next((e for e in self.events[1:] if e.kind == "start"), None)
        if agent is None:
            return None
        ready = next((e for e in self.events if e.kind == "ready" and e.time >= agent.time), None)
        boot = _boot_before(agent, ready)
        return boot if boot is not None and boot < self.opened_at else None

    @property
    def provider(self) -> str | None:
        return next((e.provider for e in self.events if e.provider is not None), None)

    def _billed_from(self) -> datetime | None:
        """Machine boot (or the agent's own count) where the record gives it, else None."""
        if self.opener.kind != "start" or self.kind != "run":
            return None
        if self.by_plane:
            return self._billed_from_agent()
        value = self.opener.details.get("billed_from")
        if isinstance(value, str):
            try:
                return min(parse_time(value), self.opened_at)
            except RecordError:
                pass
        if self.provider in BILLED_FROM_BOOT:
            ready = next((e for e in self.events[1:] if e.kind == "ready"), None)
            boot = ready.details.get("boot_to_agent_s") if ready is not None else None
            if isinstance(boot, int | float) and not isinstance(boot, bool) and 0 <= boot < math.inf:
                return self.opened_at - timedelta(seconds=boot)
        return None


def _boot_before(start: Event, ready: Event | None) -> datetime | None:
    """When the machine an agent's `start` ran on booted, as the record says: its `billed_from`, else
    its start minus the `ready` event's `boot_to_agent_s` on a provider billed from boot."""
    value = start.details.get("billed_from")
    if isinstance(value, str):
        try:
            return min(parse_time(value), start.time)
        except RecordError:
            pass
    if start.provider in BILLED_FROM_BOOT and ready is not None:
        boot = ready.details.get("boot_to_agent_s")
        if isinstance(boot, int | float) and not isinstance(boot, bool) and 0 <= boot < math.inf:
            return start.time - timedelta(seconds=boot)
    return None


def _launch_time(event: Event) -> datetime | None:
    value = event.details.get("launch_time")
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except RecordError:
        return None


def node_stretches(
    node: str, events: Sequence[Event], *, now: datetime | None = None
) -> tuple[list[Stretch], list[Event]]:
    """The billed stretches of one node from its time-sorted events, and the stray events that
    opened none and belong to none (outside any stretch, no start before them)."""
    closed: list[Stretch] = []
    strays: list[Event] = []
    current: _Open | None = None
    for e in events:
        if e.kind == "start":
            if (
                current is not None
                and current.by_plane
                and current.agent_start is None
                and e.reason != "measurement"
                and e.details.get("source") != OPERATOR_SOURCE
            ):
                current.agent_start = e.time  # the agent starting on the node the control plane started
                current.take(e)
                continue
            if current is not None:
                closed.append(current.close(current.last_seen, "next_start", None, node))
            current = _Open(e, e.time)
            continue
        if current is None:
            launch = _launch_time(e) if e.kind == "preempted" else None
            if launch is not None and launch < e.time and (not closed or launch >= closed[-1].end):
                closed.append(_Open(e, launch).close(e.time, "preempted", e, node))
                continue
            last = closed[-1] if closed else None
            if (
                e.kind == "preempted"
                and last is not None
                and last.closed_by == "stop"
                and last.notice is not None
                and last.notice.reason != "sigterm"
            ):
                closed[-1] = replace(last, end=max(last.end, e.time), closed_by="preempted", closer=e)
                continue
            strays.append(e)
            if e.kind in ("heartbeat", "ready"):
                current = _Open(e, e.time)
            continue
        current.take(e)
        if e.kind == "preempted":
            how = "simulated_preemption" if e.details.get("simulated") is True else "preempted"
            closed.append(current.close(e.time, how, e, node))
            current = None
        elif e.kind == "stop":
            closed.append(current.close(e.time, "stop", e, node))
            current = None
    if current is not None:
        if now is not None:
            closed.append(current.close(max(now, current.last_seen), "now", None, node))
        else:
            closed.append(current.close(current.last_seen, "open", None, node))
    for i in range(1, len(closed)):
        if closed[i].start < closed[i - 1].end:  # a machine boot before the last stretch's end
            closed[i] = replace(closed[i], start=closed[i - 1].end)
    return closed, strays


def stretches(events: Iterable[Event], *, now: datetime | None = None) -> list[Stretch]:
    """Every billed stretch of the record, node by node (sorted by name), each in time order."""
    by_node: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.node:
            by_node[event.node].append(event)
    out: list[Stretch] = []
    for node in sorted(by_node):
        out.extend(node_stretches(node, sorted(by_node[node], key=lambda e: e.time), now=now)[0])
    return out


# --- billed intervals and totals --------------------------------------------------------------------


@dataclass(frozen=True)
class BilledInterval:
    """A stretch of one node's billed time at one price (None: the record has no price for it)."""

    node: str
    start: datetime
    end: datetime
    price_per_hour: float | None
    currency: str | None
    closed_by: str  # how the stretch ended (CLOSED_BY), or "price" where the next price begins

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def cost(self) -> float | None:
        return None if self.price_per_hour is None else self.hours * self.price_per_hour


def intervals_of(stretch: Stretch) -> list[BilledInterval]:
    """A stretch as billed intervals, one per price."""
    pieces = stretch.segments()
    return [
        BilledInterval(
            stretch.node, a, b, p, stretch.currency, stretch.closed_by if i == len(pieces) - 1 else "price"
        )
        for i, (a, b, p) in enumerate(pieces)
    ]


def billed_intervals(events: Iterable[Event], now: datetime | None = None) -> list[BilledInterval]:
    """Every billed interval in the record, per node, in time order."""
    return [i for s in stretches(events, now=now) for i in intervals_of(s)]


def billed_seconds(events: Iterable[Event], now: datetime | None = None) -> float:
    """Billed node-seconds of the record: time on one node once, nodes added."""
    return sum(s.seconds for s in stretches(events, now=now))


def cost(
    events: Iterable[Event], now: datetime | None = None, fallback_price: float | None = None
) -> float | None:
    """What the record says was spent; unpriced time at `fallback_price`, None if it has none."""
    return spend(events, now).cost(fallback_price)


@dataclass(frozen=True)
class Spend:
    """What the record says was spent: `amount` over the priced hours, plus hours with no price."""

    amount: float
    hours: float
    unpriced_hours: float
    currencies: tuple[str, ...]
    intervals: tuple[BilledInterval, ...]

    def cost(self, fallback_price: float | None = None) -> float | None:
        """The total, with unpriced hours at `fallback_price`; None if some hours cannot be priced."""
        if self.unpriced_hours <= 0:
            return self.amount
        if fallback_price is None:
            return None
        return self.amount + self.unpriced_hours * fallback_price


def spend(events: Iterable[Event], now: datetime | None = None) -> Spend:
    intervals = tuple(billed_intervals(events, now))
    priced = [i for i in intervals if i.price_per_hour is not None]
    return Spend(
        amount=sum(i.cost or 0.0 for i in priced),
        hours=sum(i.hours for i in intervals),
        unpriced_hours=sum(i.hours for i in intervals if i.price_per_hour is None),
        currencies=tuple(sorted({i.currency for i in priced if i.currency})),
        intervals=intervals,
    )


# --- run-wide rules of a pool --------------------------------------------------------------------

#: The `details` key of an agent's `start` when it is one node of a pool (the config's `pool`
#: section). In such a run `max_runtime_hours` bounds the wall time since the run's first start;
#: in a lone node's run, its node time. The budget bounds the money of every node in both.
POOL_KEY: Final = "pool"


def is_pool(events: Iterable[Event]) -> bool:
    """Whether any agent of the run started as one node of a pool."""
    return any(e.kind == "start" and isinstance(e.details.get(POOL_KEY), dict) for e in events)


def pool_wall_hours(events: Iterable[Event], now: datetime) -> float:
    """Wall time from the run's first `start` to `now`, in hours (0 before any start)."""
    starts = [e.time for e in events if e.kind == "start"]
    return max(0.0, (now - min(starts)).total_seconds() / 3600.0) if starts else 0.0


def runtime_hours(events: Sequence[Event], now: datetime, *, running: bool = True) -> float:
    """What `max_runtime_hours` bounds, checked at `now`: a pool's wall time since its first start,
    else the node time of the record (to `now` while a node runs, else to its last event)."""
    if is_pool(events):
        return pool_wall_hours(events, now)
    return spend(events, now if running else None).hours


# --- the agent's running total -------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """Billed time of one node at one price (None: unknown), as the agent adds it up."""

    node: str
    start: datetime
    end: datetime
    price_per_hour: float | None


@dataclass(frozen=True)
class Billed:
    seconds: float
    cost: float | None  # None when some billed time has no known price
    covered_until: Mapping[str, datetime]  # per node: the end of its last billed interval


def agent_intervals(events: Iterable[Event], fallback_price: float | None) -> list[Interval]:
    """The record's billed intervals with unpriced time at `fallback_price` (the agent's price now)."""
    return [
        Interval(i.node, i.start, i.end, i.price_per_hour if i.price_per_hour is not None else fallback_price)
        for i in billed_intervals(events)
    ]


def total(intervals: Iterable[Interval]) -> Billed:
    """Node time and money: per node, overlapping intervals count once (an agent restarted without a
    reboot shares its machine's bill); different nodes add up."""
    seconds, money = 0.0, 0.0
    priced = True
    covered: dict[str, datetime] = {}
    for iv in sorted(intervals, key=lambda i: (i.node, i.start)):
        begin = max(iv.start, covered.get(iv.node, iv.start))
        length = max(0.0, (iv.end - begin).total_seconds())
        seconds += length
        if iv.price_per_hour is None:
            priced = priced and length == 0
        else:
            money += iv.price_per_hour * length / 3600.0
        covered[iv.node] = max(covered.get(iv.node, iv.end), iv.end)
    return Billed(seconds, money if priced else None, covered)
