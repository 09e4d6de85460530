"""What every reader of a provider's event history shares: the event it finds, where the stack keeps
them (`Capture`, from the stack's `event_capture` output), the reader protocol, and writing each event
into the run record once."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final, Protocol

from spoteval.clouds.base import StackOutputs
from spoteval.record import Event, RecordError, RunLayout, node_segment, parse_time
from spoteval.store import Store, StoreError

#: `details.observer` of the events this package writes: the provider saw them, not the agent
OBSERVER: Final = "provider_events"
#: the stack output naming where the stack keeps the provider's events
OUTPUT: Final = "event_capture"
#: what a capture is, by its `kind` -> the keys it must carry
CAPTURE_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "cloudwatch_logs": ("log_group",),
    "cloud_logging": ("project", "log_bucket", "location"),
    "activity_log": ("resource_group",),
    "pod_conditions": ("namespace",),
}
#: the record's event kinds a provider's event may become
KINDS: Final = ("preempted", "stop")


class EventsError(Exception):
    """The provider's events cannot be read: one line naming the stack output, option or call."""


@dataclass(frozen=True)
class ProviderEvent:
    """One interruption or state change the provider recorded, as it becomes a record event.

    `event_id` is the provider's own id of the event (EventBridge `id`, a log entry's `insertId`, an
    Activity Log `eventDataId`, a pod's uid with its condition): the record's key derives from it.
    """

    event_id: str
    node: str
    time: datetime
    kind: str  # one of KINDS
    name: str  # the provider's name of the event (detail-type, method, operation, condition reason)
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"provider event kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.time.tzinfo is None:
            raise ValueError("provider event time has no time zone")


@dataclass(frozen=True)
class Capture:
    """Where the stack keeps the provider's events: the `event_capture` stack output."""

    kind: str
    fields: Mapping[str, str]

    @classmethod
    def from_outputs(cls, outputs: StackOutputs, stack: str = "the stack") -> Capture:
        raw = outputs.extra.get(OUTPUT)
        if raw is None:
            raise EventsError(
                f"{stack}: the outputs have no {OUTPUT!r}: this stack keeps no provider events "
                f"spot-eval can read ({outputs.provider})"
            )
        kind = raw.get("kind") if isinstance(raw, Mapping) else None
        if not isinstance(kind, str) or kind not in CAPTURE_KEYS:
            raise EventsError(
                f"{stack}: outputs.{OUTPUT}.kind must be one of {', '.join(CAPTURE_KEYS)}, got {kind!r}"
            )
        assert isinstance(raw, Mapping)
        values: dict[str, str] = {}
        for key in CAPTURE_KEYS[kind]:
            value = raw.get(key)
            if not isinstance(value, str) or not value:
                raise EventsError(f"{stack}: outputs.{OUTPUT}.{key} is missing")
            values[key] = value
        return cls(kind, values)


class EventReader(Protocol):
    """Reads the provider's history of the stack's nodes."""

    def read(self) -> list[ProviderEvent]: ...


def event_key(layout: RunLayout, event: ProviderEvent, provider: str) -> str:
    """The event's object key: sortable by the provider's time, unique to the provider's event id."""
    digest = hashlib.sha256(f"{provider}\n{event.event_id}".encode()).hexdigest()[:20]
    when = event.time.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{layout.events_prefix}{when}-{node_segment(event.node)}-provider-{digest}.json"


def record_event(outputs: StackOutputs, event: ProviderEvent, source: str) -> Event:
    """The run record's event for one provider event (reason `provider`, the provider's time)."""
    details: dict[str, Any] = {
        "observer": OBSERVER,
        "source": source,
        "event_id": event.event_id,
        "provider_event": event.name,
        **event.details,
    }
    return Event(
        time=event.time,
        run_id=outputs.run_id,
        node=event.node,
        kind=event.kind,
        reason="provider",
        provider=outputs.provider,
        region=outputs.region,
        zone=outputs.zone,
        instance_type=outputs.instance_type,
        market=outputs.market,
        details=details,
    )


@dataclass(frozen=True)
class Recorded:
    """What one reading wrote: the keys created now, and those an earlier reading had created."""

    written: tuple[str, ...]
    existing: tuple[str, ...]

    def summary(self) -> str:
        return (
            f"provider events: {len(self.written) + len(self.existing)} found, "
            f"{len(self.written)} recorded now, {len(self.existing)} already in the record"
        )


def record(store: Store, outputs: StackOutputs, events: Iterable[ProviderEvent], source: str) -> Recorded:
    """Write each event once (create-only keys derived from the provider's event id)."""
    layout = RunLayout(outputs.run_id)
    written: list[str] = []
    existing: list[str] = []
    seen: set[str] = set()
    for event in sorted(events, key=lambda e: (e.time, e.event_id)):
        key = event_key(layout, event, outputs.provider)
        if key in seen:
            continue
        seen.add(key)
        try:
            data = record_event(outputs, event, source).dumps()
        except RecordError as exc:
            raise EventsError(f"provider event {event.event_id}: {exc}") from None
        try:
            created = store.put_new(key, data)
        except StoreError as exc:
            raise EventsError(f"writing {store.join(key)}: {exc}") from None
        (written if created else existing).append(key)
    return Recorded(tuple(written), tuple(existing))


def time_of(value: object, what: str) -> datetime:
    """An RFC 3339 time from a provider's payload; EventsError naming the field when it is not one."""
    try:
        return parse_time(value)  # type: ignore[arg-type]
    except RecordError as exc:
        raise EventsError(f"{what}: {exc}") from None


__all__ = [
    "CAPTURE_KEYS",
    "KINDS",
    "OBSERVER",
    "OUTPUT",
    "Capture",
    "EventReader",
    "EventsError",
    "ProviderEvent",
    "Recorded",
    "event_key",
    "record",
    "record_event",
    "time_of",
]
