"""What an earlier incarnation left in the local spool, as the record will be once it is uploaded.

The agent reads the record at start while its spool may still wait for the store (an outage at
boot): an attempt the spool holds is recorded already, not lost; its number is taken; a result it
holds makes the episode final; and the spool's last heartbeats say what that incarnation had in
flight even if they never reached the store. `spooled_events` gives those events to
`history.read_history(extra_events=...)`; `with_spool` adds the attempts to a history it read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from spoteval.agent import history as hist
from spoteval.agent.uploader import ATTEMPT, EVENT, Item
from spoteval.record import Attempt, Event, RecordError


def attempt_id(attempt: Attempt) -> tuple[object, object]:
    """(incarnation, dispatch): which run of an episode an attempt records."""
    return attempt.details.get("incarnation"), attempt.details.get("dispatch")


def spooled_events(items: Iterable[Item]) -> list[Event]:
    out: list[Event] = []
    for item in items:
        if item.kind == EVENT:
            try:
                out.append(Event.from_json(item.payload)[0])
            except RecordError:
                continue
    return out


def with_spool(history: hist.History, items: Iterable[Item]) -> hist.History:
    """The history with the spool's attempts added (those not in the store already), and the
    episodes whose result the spool holds among the results (final: not run again)."""
    spooled: dict[str, list[Attempt]] = {}
    results: set[str] = set()
    for item in items:
        if item.kind != ATTEMPT:
            continue
        try:
            attempt, _ = Attempt.from_json(item.payload)
        except RecordError:
            continue
        spooled.setdefault(attempt.episode_id, []).append(attempt)
        if item.write_result:
            results.add(attempt.episode_id)
    if not spooled:
        return history
    attempts = {e: tuple(a) for e, a in history.attempts.items()}
    numbers = {e: tuple(n) for e, n in history.attempt_numbers.items()}
    for episode, found in spooled.items():
        stored = {attempt_id(a) for a in attempts.get(episode, ())}
        new = [a for a in found if attempt_id(a) not in stored]  # uploaded, spool file not yet gone
        attempts[episode] = (*attempts.get(episode, ()), *new)
        numbers[episode] = tuple(sorted({*numbers.get(episode, ()), *(a.attempt for a in found)}))
    return dataclasses.replace(
        history, attempts=attempts, attempt_numbers=numbers, results=history.results | results
    )
