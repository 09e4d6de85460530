"""The provider's events beside the agent's own: one preemption counted once.

The record may hold two sightings of one preemption: the agent's `notice` (or a `preempted` written
by a drill or a restart measurement) and the provider's `preempted` (`details.observer`
`provider_events`). The rule, per node:

- A provider `preempted` at time P and an agent's sighting at time N are the same preemption when
  N - SLACK <= P <= N + notice + SLACK, where notice is the provider's notice length
  (spoteval/providers.py; the longest Kubernetes flavour's on Kubernetes) and SLACK is 60 s (clock
  skew between the node and the provider, and the provider's delivery). Each sighting pairs with at
  most one of the other side, earliest first. Agent sightings are notices other than rebalance
  recommendations (SIGTERM included) and `preempted` events not written from the provider's events.
- A provider `stop` (a state change to stopped or terminated without an interruption) after an agent
  `stop` of the node, with no `start` between, is that stop seen again.
- A SIGTERM notice followed by the node's own `stop` is how our own stops look from inside (as in
  the allocations of spoteval/billing.py): not a sighting of a preemption.

`reconcile(events)` returns the events the allocations are built from, and the ledger. A provider
`stop` seen again, and a provider `preempted` paired with the record's own `preempted`, are left
out. A kept provider event whose node still wrote events after the provider's time (before its
next `start`) is placed just after the last of them: the node visibly ran until then (the
provider's time is a warning, or the clocks differ). So a matched preemption ends the allocation
its notice marked, an unmatched one ends the allocation the agent never closed (as `preempted`
rather than lost), and nothing opens a second allocation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Final

from spoteval.events.base import OBSERVER
from spoteval.providers import K8S_FLAVOURS, facts
from spoteval.record import Event, format_time

SLACK: Final = timedelta(seconds=60)
#: a moved provider event lands this long after the node's last event
AFTER: Final = timedelta(microseconds=1)


def from_provider(event: Event) -> bool:
    return event.details.get("observer") == OBSERVER


def notice_length(provider: str | None) -> timedelta:
    """The provider's notice (the longest Kubernetes flavour's; two minutes when unknown)."""
    try:
        found = facts(provider or "")
    except KeyError:
        return timedelta(seconds=120)
    seconds = found.notice_s if found.notice_s is not None else max(f.notice_s for f in K8S_FLAVOURS.values())
    return timedelta(seconds=seconds)


def _agent_sightings(events: list[Event]) -> list[Event]:
    """The node's own sightings of a preemption (its events in time order). A SIGTERM followed by
    the node's own `stop` (before its next start) is how our own stops look from inside: not one."""
    out: list[Event] = []
    for i, e in enumerate(events):
        if from_provider(e) or e.kind not in ("notice", "preempted"):
            continue
        if e.kind == "notice" and e.reason == "rebalance_recommendation":
            continue
        if e.kind == "notice" and e.reason == "sigterm":
            after = next(
                (x for x in events[i + 1 :] if not from_provider(x) and x.kind in ("start", "stop")), None
            )
            if after is not None and after.kind == "stop":
                continue
        out.append(e)
    return out


@dataclass(frozen=True)
class Ledger:
    """Preemptions as each side saw them. `total` counts each preemption once."""

    agent: int  # the agent's notices (and drill or measurement `preempted` events)
    provider: int  # the provider's `preempted` events
    both: int  # pairs the rule matched
    provider_stops: int  # the provider's `stop` events (state changes without an interruption)
    repeated_stops: int  # of those, stops the agent had recorded

    @property
    def total(self) -> int:
        return self.agent + self.provider - self.both

    @property
    def provider_only(self) -> int:
        return self.provider - self.both

    @property
    def agent_only(self) -> int:
        return self.agent - self.both


_COUNTS: Final = ("agent", "provider", "both", "provider_stops", "repeated_stops")


def _pairs(agent: list[Event], provider: list[Event], window: timedelta) -> dict[int, Event]:
    """Provider event (by identity) -> the agent's sighting it pairs with, earliest first."""
    used: set[int] = set()
    out: dict[int, Event] = {}
    for p in provider:
        for i, n in enumerate(agent):
            if i not in used and n.time - SLACK <= p.time <= n.time + window + SLACK:
                used.add(i)
                out[id(p)] = n
                break
    return out


def _node(events: list[Event]) -> tuple[list[Event], Ledger]:
    events = sorted(events, key=lambda e: e.time)
    agent = _agent_sightings(events)
    provider = [e for e in events if from_provider(e) and e.kind == "preempted"]
    window = notice_length(next((e.provider for e in events if e.provider), None))
    pairs = _pairs(agent, provider, window)
    kept: list[Event] = []
    stops = repeated = 0
    for i, e in enumerate(events):
        if not from_provider(e):
            kept.append(e)
            continue
        if id(e) in pairs and pairs[id(e)].kind == "preempted":
            continue  # the record's own `preempted` (a drill's, a measurement's) already ends it
        before = [x for x in events[:i] if not from_provider(x) and x.kind in ("start", "stop")]
        if e.kind == "stop":
            stops += 1
            if before and before[-1].kind == "stop":
                repeated += 1
                continue
        later = next((x.time for x in events[i + 1 :] if x.kind == "start"), None)
        own = [
            x.time
            for x in events[i + 1 :]
            if not from_provider(x) and x.time > e.time and (later is None or x.time < later)
        ]
        if own:
            moved = max(own) + AFTER
            kept.append(replace(e, time=moved, details={**e.details, "provider_time": format_time(e.time)}))
        else:
            kept.append(e)
    return kept, Ledger(len(agent), len(provider), len(pairs), stops, repeated)


def reconcile(events: Sequence[Event]) -> tuple[list[Event], Ledger]:
    """The events to build allocations from (time-sorted per node) and the ledger of preemptions."""
    by_node: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_node[e.node].append(e)
    out: list[Event] = []
    ledgers: list[Ledger] = []
    for node in sorted(by_node):
        kept, ledger = _node(by_node[node])
        out.extend(kept)
        ledgers.append(ledger)
    out.sort(key=lambda e: e.time)
    return out, Ledger(*(sum(getattr(x, name) for x in ledgers) for name in _COUNTS))


def has_provider_events(events: Sequence[Event]) -> bool:
    return any(from_provider(e) for e in events)
