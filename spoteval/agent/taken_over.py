"""What a pool node does before it runs episodes it takes over from an ended holder: the agent's
`check` of a takeover (spoteval/claims/takeover.py).

Before the takeover entry is written, the node reads the ended holder's record of those episodes:
their results, their attempts, and what the holder had in flight (its last lease's and dispatch
journal's `in_flight`, spoteval/agent/pool_start.py). `history.plan_recovery`, the same decision a
restart of the same node makes, says what follows:

- an episode with its result is settled: it is not run again;
- an episode with a recorded final attempt (completed, or `max_attempts` failures) and no result
  is settled too: the holder ended between its attempt write and its result write, which the
  agent writes in that order (spoteval/agent/uploader.py), so the attempt is the finished work and
  its result is written now, from it;
- an attempt the holder had in flight that no attempt record accounts for is recorded
  `interrupted` (`details.lost: true`, `recorded_by` this incarnation), under the next free number;
  its episode runs again here, and the holder's failures of it count against `max_attempts`.

Nothing is written unless the takeover entry is this node's (`Settled.commit`): of several takers
exactly one writes the entry, so exactly one records the lost attempts. A holder ended `replaced`
(by its own node's next start, which took its episodes back first) has its lost attempts recorded
by that start.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from spoteval.agent import history as hist
from spoteval.agent.pool_start import events_of, journal, last_own
from spoteval.agent.uploader import ATTEMPT, Item, Uploader
from spoteval.claims import Pool
from spoteval.claims.summary import latest_lease
from spoteval.claims.takeover import Check, Settled, Takeover
from spoteval.record import Event, RunLayout, utc_now
from spoteval.store import Store


@dataclass
class Book:
    """The agent's scheduling state a takeover updates (owned by the agent's loop thread, which is
    the thread that takes episodes)."""

    final: set[str]
    failures: dict[str, int]
    next_n: dict[str, int]


def _source_events(
    pool: Pool, store: Store, layout: RunLayout, source: str
) -> tuple[list[Event], str | None]:
    """The ended holder's last lease and journal as events, and how its lease ended."""
    watch = pool.watched.get(source)
    lease, _ = latest_lease(store, pool.layout, source, watch.k if watch is not None else 0)
    if lease is None:
        return [], None
    own = last_own(pool, lease)
    events = sorted(events_of(own, layout.run_id) + journal(store, layout, own), key=lambda e: e.time)
    return events, lease.end


def takeover_check(
    pool: Pool,
    store: Store,
    uploader: Callable[[], Uploader],
    book: Book,
    *,
    incarnation: str,
    max_attempts: int,
    log: Callable[[str], None],
) -> Check:
    """The agent's check of a takeover (see the module docstring)."""
    layout = RunLayout(pool.layout.run_id)

    def check(takeover: Takeover) -> Settled:
        episodes = list(takeover.episodes)
        events: list[Event] = []
        end: str | None = None
        if takeover.source is not None:
            events, end = _source_events(pool, store, layout, takeover.source)
        node, now = (events[0].node, events[-1].time) if events else ("", utc_now())
        incarnations = hist.group_incarnations(events)
        bare = hist.History(tuple(events), incarnations, frozenset(), {})
        in_flight = {c.episode_id for c in hist.lost_candidates(hist.unresolved(bare, node, now))}
        results = frozenset(e for e in episodes if store.exists(layout.result(e)))
        numbers: dict[str, list[int]] = {}
        for episode in episodes:
            if episode in results and episode not in in_flight:
                continue
            for key in store.list(layout.attempts_of(episode)):
                parsed = layout.attempt_of_key(key)
                if parsed is not None:
                    numbers.setdefault(episode, []).append(parsed[1])
        with ThreadPoolExecutor(max_workers=4) as executor:
            attempts, _ = hist.read_attempts(store, layout, numbers, executor)
        history = hist.History(
            events=tuple(events),
            incarnations=incarnations,
            results=results,
            attempt_numbers={e: tuple(sorted(ns)) for e, ns in numbers.items()},
            attempts=attempts,
        )
        plan = hist.plan_recovery(
            history, node, now, episodes, max_attempts=max_attempts, incarnation=incarnation
        )
        lost_all = () if end == "replaced" else plan.interrupted

        def commit(moved: frozenset[str]) -> None:
            lost = [a for a in lost_all if a.episode_id in moved]
            results = [a for a in plan.results if a.episode_id in moved]
            up = uploader()
            with up.batch():
                for attempt in lost:
                    up.submit(Item(ATTEMPT, attempt.to_json()))
                for attempt in results:
                    up.submit(Item(ATTEMPT, attempt.to_json(), write_result=True))
            book.final.update(plan.final & moved)
            for episode, n in plan.failures.items():
                if episode in moved and episode not in plan.final:
                    book.failures[episode] = max(book.failures.get(episode, 0), n)
            for episode, n in plan.next_n.items():
                if episode in moved:
                    book.next_n[episode] = max(book.next_n.get(episode, 1), n)
            if lost or results:
                log(
                    f"took over {len(moved)} episode(s) of {takeover.source or 'nobody'}: "
                    f"{len(lost)} attempt(s) it had in flight recorded as interrupted (node lost), "
                    f"{len(results)} result(s) written from its recorded attempts"
                )

        return Settled(results=results, final=plan.final, commit=commit)

    return check
