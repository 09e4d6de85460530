"""The operator's reading and writing of the run record.

It writes to `events/` only what changes a node's billed time, so the report, the agent and the
budget checks count every node-second once:

- `start`, reason `restart_after_preemption`, when a start it asked for has the node running: the
  event's time is the moment the provider said running, its price and `price_source` the price it
  read just before the start, its details `source: operator`, `requested` (when the start that
  succeeded was asked), `waited_s` (from the preemption the record shows to running: the capacity
  wait, S_wait) and `capacity_errors` (refused starts before it). The node's agent then writes its
  own `start` when it boots; the report reads it as the agent starting inside the allocation the
  operator's start opened (as it does for a restart measurement), not as a new allocation.
- `stop`, reason `done` or `stop_rule:*`, after it stopped a running node (the time it saw the node
  stopped), unless the node's record already ends with a stop (then only the journal says so).

Everything else goes to the operator's journal, a prefix of the run record that other readers
ignore: `runs/{run_id}/operator/{UTC time}-{node}-{seq}.json`, one object per note with `time`,
`node`, `what` (`refused`, `capacity_error`, `start_error`, `stopped`, `read_error`, `deadline`),
`reason`, `message` and `details`. A refusal is written once per node and reason until the node starts
again; capacity errors carry the provider's message and the wait before the next try; a deadline
note (spoteval.operate.deadline) once per switch the spot policy's rule asks for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from spoteval.clouds import Price, StackOutputs
from spoteval.manifest import parse_manifest
from spoteval.node_status import Refusal, record_node
from spoteval.record import (
    Event,
    RecordError,
    RunLayout,
    format_time,
    node_segment,
    parse_time,
)
from spoteval.store import Store, StoreError

SOURCE: Final = "operator"
NOTE_KINDS: Final = frozenset(
    {"refused", "capacity_error", "start_error", "stopped", "read_error", "deadline"}
)


def journal_prefix(layout: RunLayout) -> str:
    return f"{layout.prefix}operator/"


@dataclass(frozen=True)
class Note:
    time: datetime
    node: str
    what: str
    reason: str | None
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": format_time(self.time),
            "node": self.node,
            "what": self.what,
            "reason": self.reason,
            "message": self.message,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, obj: object) -> Note | None:
        if not isinstance(obj, Mapping):
            return None
        try:
            time = parse_time(obj.get("time"))  # type: ignore[arg-type]
        except RecordError:
            return None
        details = obj.get("details")
        return cls(
            time=time,
            node=str(obj.get("node") or ""),
            what=str(obj.get("what") or ""),
            reason=obj.get("reason") if isinstance(obj.get("reason"), str) else None,
            message=str(obj.get("message") or ""),
            details=dict(details) if isinstance(details, Mapping) else {},
        )


@dataclass(frozen=True)
class RunView:
    """What the run record says, read once per check."""

    events: tuple[Event, ...]
    notes: tuple[Note, ...]
    episodes: int | None  # in the manifest (None: no manifest yet)
    missing: int | None  # episodes of the manifest without a result
    problems: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.missing == 0 and bool(self.episodes)

    def refusals(self) -> list[Refusal]:
        return [
            Refusal(n.time, n.node, n.reason or "grant", n.message) for n in self.notes if n.what == "refused"
        ]

    def notes_of(self, node: str, what: str, since: datetime | None = None) -> list[Note]:
        name = record_node(node)
        return [
            n
            for n in self.notes
            if record_node(n.node) == name and n.what == what and (since is None or n.time >= since)
        ]


def _read_json_objects(store: Store, keys: Sequence[str]) -> list[tuple[str, bytes | None]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(zip(keys, pool.map(store.get, keys), strict=True))


def read_run(store: Store, layout: RunLayout, cache: dict[str, object] | None = None) -> RunView:
    """Events, the operator's notes, and how many episodes of the manifest have no result yet.

    Objects of the record are written once (create-only), so a `cache` kept between checks maps each
    key already read to what it held, and only new keys are fetched."""
    seen: dict[str, object] = {} if cache is None else cache
    problems: list[str] = []
    events: list[Event] = []
    notes: list[Note] = []
    keys = store.list(layout.events_prefix) + store.list(journal_prefix(layout))
    fresh = [k for k in keys if k not in seen]
    for key, data in _read_json_objects(store, fresh):
        if data is not None:
            seen[key] = _parse(key, data, layout)
    for key in keys:
        item = seen.get(key)
        if isinstance(item, Event):
            events.append(item)
        elif isinstance(item, Note):
            notes.append(item)
        elif isinstance(item, str):
            problems.append(item)
    episodes = missing = None
    manifest = store.get(layout.manifest)
    if manifest is not None:
        try:
            ids = [entry.id for entry in parse_manifest(manifest.decode())]
        except (RecordError, UnicodeDecodeError) as exc:
            problems.append(f"{layout.manifest}: {exc}")
        else:
            results = {
                e for e in (layout.episode_of_result(k) for k in store.list(layout.results_prefix)) if e
            }
            episodes, missing = len(ids), sum(1 for i in ids if i not in results)
    events.sort(key=lambda e: e.time)
    notes.sort(key=lambda n: n.time)
    return RunView(tuple(events), tuple(notes), episodes, missing, tuple(problems))


def _parse(key: str, data: bytes, layout: RunLayout) -> Event | Note | str:
    """An event or a note, or the problem with it (a string)."""
    if key.startswith(layout.events_prefix):
        try:
            return Event.loads(data)[0]
        except RecordError as exc:
            return f"{key}: {exc}"
    try:
        note = Note.from_json(json.loads(data))
    except ValueError:
        note = None
    return note if note is not None else f"{key}: not an operator note"


class Journal:
    """Writes the operator's events and notes (create-only, like every writer of the record)."""

    def __init__(self, store: Store, outputs: StackOutputs) -> None:
        self.store = store
        self.outputs = outputs
        self.layout = RunLayout(outputs.run_id)
        self._seq = 0

    def _put(self, key_of: Any, data: bytes, what: str) -> None:
        for _ in range(100):
            self._seq += 1
            if self.store.put_new(key_of(self._seq), data):
                return
        raise StoreError(f"could not write {what} under {self.store.join(self.layout.prefix)}")

    def event(
        self,
        time: datetime,
        node: str,
        kind: str,
        reason: str,
        *,
        price: Price | None,
        details: Mapping[str, Any],
    ) -> Event:
        name = record_node(node)
        event = self.outputs.event(
            time, name, kind, reason, price=price, details={"source": SOURCE, **details}
        )
        self._put(lambda seq: self.layout.event(time, name, seq), event.dumps(), f"a {kind} event")
        return event

    def note(self, note: Note) -> Note:
        prefix = journal_prefix(self.layout)
        stamp = note.time.strftime("%Y%m%dT%H%M%S.%fZ")
        data = json.dumps(note.to_json(), sort_keys=True).encode()
        self._put(
            lambda seq: f"{prefix}{stamp}-{node_segment(record_node(note.node))}-{seq:06d}.json",
            data,
            "a note",
        )
        return note


def latest(notes: Iterable[Note]) -> Note | None:
    return max(notes, key=lambda n: n.time, default=None)
