"""A pool node's start without the event history: the earlier incarnations it must know about are
rebuilt from the pool's leases (each lease's `state` is what the agent wrote there: its incarnation,
start, billed-from time, price, heartbeat, in-flight attempts, the notice and the stop it saw).

`read_pool_history` returns the same `History` as `history.read_history`, so the recovery planning
(`history.plan_recovery`: start reason, lost attempts, results to write) is unchanged; only its
events differ: per holder a `start`, then its `notice` and its last `heartbeat` or `stop`, all from
its last lease, for this node's earlier holders, the holders alive at the start and those that ended
since the last summary. The results and attempts are listed as before; events are read only from
the journal of this node's holders that the join took back. Only those holders' in-flight
attempts are the start's to record as lost: any other holder's are recorded by the node whose
takeover moves its episodes (spoteval/agent/taken_over.py), exactly once.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from spoteval.agent import history as hist
from spoteval.claims import Lease, Pool
from spoteval.claims.summary import own_last
from spoteval.record import Event, RecordError, RunLayout, node_segment, parse_time
from spoteval.store import Store


def last_own(pool: Pool, lease: Lease) -> Lease:
    """The holder's own last lease: the one before an end written by another node."""
    return own_last(pool.store, pool.layout, lease)


def _time(value: object) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except RecordError:
        return None


def journal(store: Store, layout: RunLayout, lease: Lease) -> list[Event]:
    """The holder's own events from shortly before its last lease on: its dispatch journal is written
    before attempts start, so the last one lists what it had in flight when it was lost (the lease may
    be up to a renewal older). Listed from a key offset: only the run's latest events are listed.
    Events of a later holder of the same incarnation (it was fenced and rejoined: `details.holder`)
    are not the holder's."""
    since = _time(lease.time)
    incarnation = lease.state.get("incarnation")
    if since is None or not isinstance(incarnation, str):
        return []
    first = layout.event(since - timedelta(seconds=2), "x", 0)
    offset = first[: first.index("Z-", len(layout.events_prefix)) + 1]  # the time part only
    marker = f"-{node_segment(lease.node)}-"
    out: list[Event] = []
    for key in store.list(layout.events_prefix, offset=offset):
        if marker not in key[len(layout.events_prefix) :]:
            continue
        try:
            event, _ = Event.loads(store.get(key) or b"")
        except RecordError:
            continue
        if event.details.get("incarnation") == incarnation and event.details.get("holder") in (
            None,
            lease.holder,
        ):
            out.append(event)
    return out


def events_of(lease: Lease, run_id: str, *, in_flight: bool = True) -> list[Event]:
    """The events a holder's last lease stands for (none when it carries no agent state); without
    its in-flight attempts unless `in_flight` (another node's takeover records those)."""
    state: Mapping[str, Any] = lease.state
    incarnation = state.get("incarnation")
    last = _time(lease.time)
    if not isinstance(incarnation, str) or last is None:
        return []
    started = _time(state.get("started")) or last
    price = state.get("price")
    common: dict[str, Any] = {
        "run_id": run_id,
        "node": lease.node,
        "price_per_hour": price if isinstance(price, int | float) and not isinstance(price, bool) else None,
    }
    start_details = {
        "incarnation": incarnation,
        "billed_from": state.get("billed_from"),
        "heartbeat_s": state.get("heartbeat_s"),
        "from_lease": True,
    }
    events = [Event(time=started, kind="start", reason="initial", details=start_details, **common)]
    notice = state.get("notice")
    if isinstance(notice, str):
        events.append(
            Event(time=last, kind="notice", reason=notice, details={"incarnation": incarnation}, **common)
        )
    stop = state.get("stop")
    details: dict[str, Any] = {"incarnation": incarnation}
    if in_flight:
        details["in_flight"] = state.get("in_flight") or []
    if isinstance(stop, str) and lease.end == "released":
        events.append(Event(time=last, kind="stop", reason=stop, details=details, **common))
    else:
        events.append(Event(time=last, kind="heartbeat", details=details, **common))
    return events


def read_pool_history(
    pool: Pool,
    store: Store,
    layout: RunLayout,
    episode_ids: Iterable[str],
    *,
    node: str,
    now: datetime,
    executor: ThreadPoolExecutor,
    extra_events: Iterable[Event] = (),
    state: Mapping[str, Any] | None = None,
) -> hist.History:
    """Join the pool and read what a start needs (see the module docstring)."""
    done = frozenset(
        e for e in (layout.episode_of_result(k) for k in store.list(layout.results_prefix)) if e is not None
    )
    view = pool.join(done, state)
    # this node's holders that the join took back (spoteval/claims/takeover.py): this start records
    # the attempts they lost; any other holder's are recorded by whichever node takes its episodes over
    reclaimed = set(pool.own_old)
    leases = [*view.leases.values(), *view.ended.values()]
    last = view.summary.last_by_node.get(node)
    if isinstance(last, dict):
        try:
            leases.append(Lease.from_json(last))
        except RecordError as exc:
            pool.problems.append(f"summary: last state of {node}: {exc}")
    events: list[Event] = []
    for lease in leases:
        if lease.holder == pool.holder:
            continue
        own = last_own(pool, lease)
        taken_back = own.holder in reclaimed
        events.extend(events_of(own, layout.run_id, in_flight=taken_back))
        if taken_back:  # its last journal too
            events.extend(journal(store, layout, own))
    seen = {json.dumps(e.to_json(), sort_keys=True) for e in events}
    for extra in extra_events:  # the spool's: what an earlier incarnation on this disk wrote last
        holder = extra.details.get("holder")
        event = extra
        if "in_flight" in extra.details and holder is not None and holder not in reclaimed:
            event = dataclasses.replace(
                extra, details={k: v for k, v in extra.details.items() if k != "in_flight"}
            )
        if json.dumps(extra.to_json(), sort_keys=True) not in seen:
            events.append(event)
    events.sort(key=lambda e: e.time)
    numbers: dict[str, list[int]] = defaultdict(list)
    for key in store.list(layout.attempts_prefix):
        parsed = layout.attempt_of_key(key)
        if parsed is not None:
            numbers[parsed[0]].append(parsed[1])
    history = hist.History(
        events=tuple(events),
        incarnations=hist.group_incarnations(events),
        results=done,
        attempt_numbers={e: tuple(sorted(ns)) for e, ns in numbers.items()},
        problems=tuple(pool.problems),
    )
    wanted = {e for e in episode_ids if e not in done and e in numbers}
    wanted.update(c.episode_id for c in hist.lost_candidates(hist.unresolved(history, node, now)))
    attempts, more = hist.read_attempts(
        store, layout, {e: numbers[e] for e in wanted if e in numbers}, executor
    )
    return hist.History(
        events=history.events,
        incarnations=history.incarnations,
        results=done,
        attempt_numbers=history.attempt_numbers,
        attempts=attempts,
        problems=(*history.problems, *more),
    )
