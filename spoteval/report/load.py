"""Reading a run record for the report: manifest, events, attempts and results; problems, not failures."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Final, TypeVar

from spoteval.manifest import ManifestEntry, parse_manifest
from spoteval.record import Attempt, Event, RecordError, RunLayout
from spoteval.store import Store, StoreError

DEFAULT_HEARTBEAT_S: Final = 30.0
#: An allocation silent for this many heartbeat intervals (and not stopped) was lost without notice.
LOST_AFTER_HEARTBEATS: Final = 3.0
CONFIDENCE: Final = 0.95

PROBLEM_CATEGORIES: Final = (
    "malformed",  # not JSON, not an object, no usable time
    "unknown_value",  # a kind, reason, outcome, market or price source outside the closed lists
    "unknown_field",  # a field this version does not know
    "invalid",  # a known field with a wrong type or value
    "missing",  # something the report needs is not in the record
    "inconsistent",  # objects that disagree with each other
)


class ReportError(Exception):
    """The report cannot be made: no such run, unreachable store, bad arguments. Names the problem."""


# --- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Something in the record the report could not take at face value."""

    key: str
    category: str
    message: str


@dataclass(frozen=True)
class RunRecord:
    """The parsed run record of one run. Events are sorted by time (then by object name)."""

    run_id: str
    store_url: str
    manifest: tuple[ManifestEntry, ...] | None
    events: tuple[Event, ...]
    attempts: tuple[Attempt, ...]
    results: Mapping[str, Attempt]
    problems: tuple[Problem, ...]
    objects: int = 0


def _categorise(message: str) -> str:
    if message.startswith(("unknown event kind", "unknown reason", "unknown market", "unknown price_source")):
        return "unknown_value"
    if message.startswith(("unknown attempt outcome", "unknown result outcome")):
        return "unknown_value"
    return "invalid"


_Parsed = TypeVar("_Parsed", Event, Attempt)


def _parsed(
    key: str, what: str, loads: Callable[[], tuple[_Parsed, list[str]]], problems: list[Problem]
) -> _Parsed | None:
    """One object of the record, or None when it cannot be read; its problems added to `problems`."""
    try:
        obj, found = loads()
    except RecordError as exc:
        problems.append(Problem(key, "malformed", str(exc)))
        return None
    problems.extend(Problem(key, _categorise(m), m) for m in found)
    if obj.extra:
        names = ", ".join(sorted(obj.extra))
        problems.append(Problem(key, "unknown_field", f"unknown {what} fields: {names}"))
    return obj


def parse_record(
    run_id: str, objects: Mapping[str, bytes], store_url: str = "", manifest: bytes | None = None
) -> RunRecord:
    """Parse the objects of one run (keys relative to the store root). Never raises on content."""
    layout = RunLayout(run_id)
    problems: list[Problem] = []
    manifest_entries: tuple[ManifestEntry, ...] | None = None
    if manifest is None:
        problems.append(Problem(layout.manifest, "missing", "no manifest: pending episodes are unknown"))
    else:
        try:
            manifest_entries = tuple(parse_manifest(manifest.decode("utf-8", errors="replace")))
        except RecordError as exc:
            problems.append(Problem(layout.manifest, "malformed", str(exc)))

    events: list[tuple[datetime, str, Event]] = []
    attempts: list[Attempt] = []
    results: dict[str, Attempt] = {}
    for key in sorted(objects):
        data = objects[key]
        if key.startswith(layout.events_prefix):
            event = _parsed(key, "event", partial(Event.loads, data), problems)
            if event is None:
                continue
            if event.run_id != run_id:
                problems.append(Problem(key, "inconsistent", "event names another run"))
            if not event.node:
                problems.append(Problem(key, "invalid", "event has no node; left out"))
                continue
            events.append((event.time, key, event))
        elif key.startswith(layout.attempts_prefix):
            where = layout.attempt_of_key(key)
            attempt = _parsed(key, "attempt", partial(Attempt.loads, data), problems)
            if attempt is None:
                continue
            if where is None:
                problems.append(Problem(key, "inconsistent", "attempt object outside the layout"))
            elif where != (attempt.episode_id, attempt.attempt):
                problems.append(
                    Problem(key, "inconsistent", "attempt's episode or number differs from its key")
                )
            attempts.append(attempt)
        elif key.startswith(layout.results_prefix):
            episode = layout.episode_of_result(key)
            result = _parsed(key, "result", partial(Attempt.loads, data, as_result=True), problems)
            if result is None:
                continue
            if episode is None or episode != result.episode_id:
                problems.append(Problem(key, "inconsistent", "result's episode differs from its key"))
            results[episode or result.episode_id] = result
    if manifest_entries is not None:
        ids = {e.id for e in manifest_entries}
        for episode in sorted(set(results) - ids):
            problems.append(
                Problem(
                    f"{layout.results_prefix}{episode}.json",
                    "inconsistent",
                    "result for an episode not in the manifest",
                )
            )
    events.sort(key=lambda t: (t[0], t[1]))
    return RunRecord(
        run_id=run_id,
        store_url=store_url,
        manifest=manifest_entries,
        events=tuple(e for _, _, e in events),
        attempts=tuple(attempts),
        results=results,
        problems=tuple(problems),
        objects=len(objects) + (manifest is not None),
    )


def load_run(store: Store, run_id: str, *, workers: int = 16) -> RunRecord:
    """Read one run's record from the store. Raises ReportError when the run is not there."""
    try:
        layout = RunLayout(run_id)
    except RecordError as exc:
        raise ReportError(f"--run {run_id!r}: {exc}") from None
    try:
        keys = [
            k
            for prefix in (layout.events_prefix, layout.attempts_prefix, layout.results_prefix)
            for k in store.list(prefix)
        ]
        manifest = store.get(layout.manifest)
        if not keys and manifest is None:
            raise ReportError(f"no run {run_id!r} in {store.url} (nothing under {layout.prefix})")
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            blobs = list(pool.map(store.get, keys))
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    objects = {k: b for k, b in zip(keys, blobs, strict=True) if b is not None}
    return parse_record(run_id, objects, store.url, manifest)
