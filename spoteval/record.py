"""The run record: event kinds, reasons, attempt outcomes and the store layout (the manifest's reader
and writer: spoteval/manifest.py; what in it is private: spoteval/redaction.py).

This module is the contract between the node agent (which writes the record), and the scripts
(which read it). Layout, relative to the store's root:

    runs/{run_id}/manifest.jsonl                  one line per episode: {"id": "...", ...params}
    runs/{run_id}/results/{episode_id}.json       create-only: the episode's final outcome
    runs/{run_id}/attempts/{episode_id}/{n}.json  every ended attempt, with its outcome
    runs/{run_id}/events/{UTC time}-{node}-{seq}.json   one object per event, sortable by name
    runs/{run_id}/harness/{episode_id}/...        create-only: harness shards' samples and logs
                                                  (keys in spoteval/harness/progress.py)
    runs/{run_id}/pool/...                        create-only: a pool's claims (spoteval/claims/)
    runs/{run_id}/operator/{UTC time}-{node}-{seq}.json   create-only: the operator's journal
                                                  (spoteval/operate/journal.py)
    runs/{run_id}/operator-lease/{k:08d}.json     create-only: the operator lease, one operator at a
                                                  time (spoteval/operate/lease.py)

Readers ignore the prefixes they do not know.

Writing is strict: an unknown kind, reason or outcome raises `RecordError`. Reading is lenient:
`Event.from_json` and `Attempt.from_json` keep unknown fields and values and report them as
problems, and never raise on a JSON object (only on something that is not an object at all).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

# --- closed lists -------------------------------------------------------------------------------

START_REASONS: Final = frozenset(
    {"initial", "restart_after_preemption", "restart_after_stop", "measurement", "user"}
)
NOTICE_REASONS: Final = frozenset(
    {"spot_interruption", "rebalance_recommendation", "preempted", "scheduled_event", "sigterm"}
)
PREEMPTED_REASONS: Final = frozenset({"provider"})
STOP_REASONS: Final = frozenset(
    {
        "done",
        "stop_rule:max_runtime",
        "stop_rule:idle",
        "stop_rule:budget",
        "stop_rule:price_cap",
        "measurement",
        "user",
        # the provider's own record says the node stopped or was terminated, and names no
        # interruption: the cause is not in its event (a stop rule, a poweroff, a user's console)
        "provider",
    }
)

#: kind -> allowed reasons; `None` in the set means the reason must be null.
REASONS: Final[Mapping[str, frozenset[str | None]]] = {
    "start": frozenset(START_REASONS),
    "ready": frozenset({None}),
    "notice": frozenset(NOTICE_REASONS),
    "preempted": frozenset(PREEMPTED_REASONS),
    "stop": frozenset(STOP_REASONS),
    "heartbeat": frozenset({None}),
}
EVENT_KINDS: Final = frozenset(REASONS)

ATTEMPT_OUTCOMES: Final = frozenset({"completed", "model_failure", "harness_error", "interrupted"})
#: `harness_error`: the episode failed for reasons that are not the model's; never in its scores.
RESULT_OUTCOMES: Final = frozenset({"completed", "model_failure", "harness_error"})
MARKETS: Final = frozenset({"spot", "on_demand"})
PRICE_SOURCES: Final = frozenset({"api", "configured", "unknown"})

EVENT_FIELDS: Final = (
    "time",
    "run_id",
    "node",
    "kind",
    "reason",
    "provider",
    "region",
    "zone",
    "instance_type",
    "market",
    "price_per_hour",
    "currency",
    "price_source",
    "details",
)
ATTEMPT_FIELDS: Final = (
    "episode_id",
    "outcome",
    "attempt",
    "node",
    "started",
    "ended",
    "output",
    "error",
    "details",
)

_FRACTION = re.compile(r"(?<=\d\d:\d\d:\d\d)\.(\d+)")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+@-]{0,254}$")


class RecordError(ValueError):
    """A record that must not be written (unknown kind, reason or outcome, bad id or time)."""


# --- time ---------------------------------------------------------------------------------------


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a `Z`: `2026-11-30T04:54:00.123456Z`."""
    if t.tzinfo is None:
        raise RecordError(f"time {t!r} has no time zone")
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 time (any offset, `Z` allowed) into an aware UTC datetime."""
    if not isinstance(value, str):
        raise RecordError(f"time {value!r} is not a string")
    text = value.replace("Z", "+00:00").replace("z", "+00:00")
    # Python 3.10's fromisoformat takes only 3 or 6 fraction digits: pad or cut to 6
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text, count=1)
    try:
        t = datetime.fromisoformat(text)
    except ValueError as exc:
        raise RecordError(f"time {value!r} is not RFC 3339") from exc
    if t.tzinfo is None:
        raise RecordError(f"time {value!r} has no time zone")
    return t.astimezone(timezone.utc)


def _compact_time(t: datetime) -> str:
    """Sortable, path-safe UTC time for event object names: `20261130T045400.123456Z`."""
    return t.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


# --- ids and layout -----------------------------------------------------------------------------


def check_id(value: object, what: str) -> str:
    """An id that is safe as one path segment of an object key."""
    if not isinstance(value, str) or not _SAFE_ID.match(value) or ".." in value:
        raise RecordError(
            f"{what} {value!r} must be 1-255 characters of letters, digits and ._=+@- "
            "starting with a letter or digit"
        )
    return value


def node_segment(node: str) -> str:
    """A node id made safe as part of an event object's name (the name sorts by its leading time)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", node) or "node"


@dataclass(frozen=True)
class RunLayout:
    """Object keys of one run, relative to the store's root."""

    run_id: str

    def __post_init__(self) -> None:
        check_id(self.run_id, "run_id")

    @property
    def prefix(self) -> str:
        return f"runs/{self.run_id}/"

    @property
    def manifest(self) -> str:
        return f"{self.prefix}manifest.jsonl"

    @property
    def results_prefix(self) -> str:
        return f"{self.prefix}results/"

    @property
    def attempts_prefix(self) -> str:
        return f"{self.prefix}attempts/"

    @property
    def events_prefix(self) -> str:
        return f"{self.prefix}events/"

    def result(self, episode_id: str) -> str:
        return f"{self.results_prefix}{check_id(episode_id, 'episode id')}.json"

    def attempts_of(self, episode_id: str) -> str:
        return f"{self.attempts_prefix}{check_id(episode_id, 'episode id')}/"

    def attempt(self, episode_id: str, n: int) -> str:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise RecordError(f"attempt number {n!r} must be an integer >= 1")
        return f"{self.attempts_of(episode_id)}{n}.json"

    def event(self, time: datetime, node: str, seq: int) -> str:
        return f"{self.events_prefix}{_compact_time(time)}-{node_segment(node)}-{seq:06d}.json"

    def episode_of_result(self, key: str) -> str | None:
        """The episode id a results/ key names, or None for a key that is not a result."""
        if not key.startswith(self.results_prefix) or not key.endswith(".json"):
            return None
        name = key[len(self.results_prefix) : -len(".json")]
        return name if "/" not in name and name else None

    def attempt_of_key(self, key: str) -> tuple[str, int] | None:
        """(episode id, n) of an attempts/ key, or None."""
        if not key.startswith(self.attempts_prefix) or not key.endswith(".json"):
            return None
        parts = key[len(self.attempts_prefix) : -len(".json")].split("/")
        if len(parts) != 2 or not parts[1].isdigit():
            return None
        return parts[0], int(parts[1])


# --- events -------------------------------------------------------------------------------------


def _opt_str(obj: Mapping[str, Any], key: str, problems: list[str]) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    problems.append(f"{key} {value!r} is not a string")
    return str(value)


def _opt_float(obj: Mapping[str, Any], key: str, problems: list[str]) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{key} {value!r} is not a number")
        return None
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        problems.append(f"{key} {value!r} is not a finite number")
        return None
    return number


def _details(obj: Mapping[str, Any], key: str, problems: list[str]) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key} {value!r} is not an object")
        return {"value": value}
    return dict(value)


@dataclass(frozen=True)
class Event:
    """One event of the run record (see DESIGN.md). `extra` keeps fields this version does not know."""

    time: datetime
    run_id: str
    node: str
    kind: str
    reason: str | None = None
    provider: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str | None = None
    price_per_hour: float | None = None
    currency: str | None = None
    price_source: str = "unknown"
    details: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """What makes this event unfit to write (empty when it is valid)."""
        out: list[str] = []
        if self.time.tzinfo is None:
            out.append("time has no time zone")
        for what, value in (("run_id", self.run_id), ("node", self.node)):
            if not isinstance(value, str) or not value:
                out.append(f"{what} must be a non-empty string")
        allowed = REASONS.get(self.kind)
        if allowed is None:
            out.append(f"unknown event kind {self.kind!r} (known: {', '.join(sorted(REASONS))})")
        elif self.reason not in allowed:
            if None in allowed:
                out.append(f"event kind {self.kind!r} takes no reason, got {self.reason!r}")
            else:
                known = ", ".join(sorted(r for r in allowed if r is not None))
                out.append(f"unknown reason {self.reason!r} for {self.kind!r} (known: {known})")
        if self.market is not None and self.market not in MARKETS:
            out.append(f"unknown market {self.market!r} (known: on_demand, spot)")
        if self.price_source not in PRICE_SOURCES:
            out.append(f"unknown price_source {self.price_source!r} (known: api, configured, unknown)")
        if self.price_per_hour is not None and self.price_per_hour < 0:
            out.append(f"price_per_hour {self.price_per_hour} is negative")
        return out

    def to_json(self) -> dict[str, Any]:
        """The object to write; raises RecordError for an event outside the closed lists."""
        problems = self.problems()
        if problems:
            raise RecordError("; ".join(problems))
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "time": format_time(self.time),
                "run_id": self.run_id,
                "node": self.node,
                "kind": self.kind,
                "reason": self.reason,
                "provider": self.provider,
                "region": self.region,
                "zone": self.zone,
                "instance_type": self.instance_type,
                "market": self.market,
                "price_per_hour": self.price_per_hour,
                "currency": self.currency,
                "price_source": self.price_source,
                "details": dict(self.details),
            }
        )
        return out

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, obj: object) -> tuple[Event, list[str]]:
        """Parse leniently: unknown fields go to `extra`, unknown values are kept and reported.

        Raises RecordError only when `obj` is not a JSON object or has no usable time.
        """
        if not isinstance(obj, dict):
            raise RecordError(f"event is not a JSON object: {type(obj).__name__}")
        problems: list[str] = []
        try:
            time = parse_time(obj.get("time"))  # type: ignore[arg-type]
        except RecordError as exc:
            raise RecordError(f"event time: {exc}") from None
        kind = obj.get("kind")
        if not isinstance(kind, str):
            problems.append(f"kind {kind!r} is not a string")
            kind = str(kind)
        reason = obj.get("reason")
        if reason is not None and not isinstance(reason, str):
            problems.append(f"reason {reason!r} is not a string")
            reason = str(reason)
        source = obj.get("price_source", "unknown")
        event = cls(
            time=time,
            run_id=str(obj.get("run_id", "")),
            node=str(obj.get("node", "")),
            kind=kind,
            reason=reason,
            provider=_opt_str(obj, "provider", problems),
            region=_opt_str(obj, "region", problems),
            zone=_opt_str(obj, "zone", problems),
            instance_type=_opt_str(obj, "instance_type", problems),
            market=_opt_str(obj, "market", problems),
            price_per_hour=_opt_float(obj, "price_per_hour", problems),
            currency=_opt_str(obj, "currency", problems),
            price_source=source if isinstance(source, str) else str(source),
            details=_details(obj, "details", problems),
            extra={k: v for k, v in obj.items() if k not in EVENT_FIELDS},
        )
        problems.extend(event.problems())
        return event, problems

    @classmethod
    def loads(cls, data: bytes | str) -> tuple[Event, list[str]]:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecordError(f"event is not JSON: {exc}") from None
        return cls.from_json(obj)


# --- attempts and results -----------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of an episode; a result is the final attempt, stored under results/."""

    episode_id: str
    outcome: str
    attempt: int
    node: str
    started: datetime
    ended: datetime
    output: Any = None
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()

    def problems(self, *, as_result: bool = False) -> list[str]:
        out: list[str] = []
        try:
            check_id(self.episode_id, "episode_id")
        except RecordError as exc:
            out.append(str(exc))
        allowed = RESULT_OUTCOMES if as_result else ATTEMPT_OUTCOMES
        if self.outcome not in allowed:
            what = "result" if as_result else "attempt"
            out.append(f"unknown {what} outcome {self.outcome!r} (known: {', '.join(sorted(allowed))})")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            out.append(f"attempt {self.attempt!r} must be an integer >= 1")
        if not isinstance(self.node, str) or not self.node:
            out.append("node must be a non-empty string")
        if self.started.tzinfo is None or self.ended.tzinfo is None:
            out.append("started and ended must be aware times")
        elif self.ended < self.started:
            out.append("ended is before started")
        if self.outcome == "completed" and self.output is None:
            out.append("a completed attempt carries the episode's output")
        return out

    def to_json(self, *, as_result: bool = False) -> dict[str, Any]:
        problems = self.problems(as_result=as_result)
        if problems:
            raise RecordError("; ".join(problems))
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "episode_id": self.episode_id,
                "outcome": self.outcome,
                "attempt": self.attempt,
                "node": self.node,
                "started": format_time(self.started),
                "ended": format_time(self.ended),
                "details": dict(self.details),
            }
        )
        if self.output is not None:
            out["output"] = self.output
        if self.error is not None:
            out["error"] = self.error
        return out

    def dumps(self, *, as_result: bool = False) -> bytes:
        return json.dumps(self.to_json(as_result=as_result), sort_keys=True).encode()

    @classmethod
    def from_json(cls, obj: object, *, as_result: bool = False) -> tuple[Attempt, list[str]]:
        if not isinstance(obj, dict):
            raise RecordError(f"attempt is not a JSON object: {type(obj).__name__}")
        problems: list[str] = []
        times: list[datetime] = []
        for key in ("started", "ended"):
            try:
                times.append(parse_time(obj.get(key)))  # type: ignore[arg-type]
            except RecordError as exc:
                raise RecordError(f"attempt {key}: {exc}") from None
        n = obj.get("attempt")
        if isinstance(n, bool) or not isinstance(n, int):
            problems.append(f"attempt {n!r} is not an integer")
            n = 1
        error = obj.get("error")
        attempt = cls(
            episode_id=str(obj.get("episode_id", "")),
            outcome=str(obj.get("outcome", "")),
            attempt=n,
            node=str(obj.get("node", "")),
            started=times[0],
            ended=times[1],
            output=obj.get("output"),
            error=None if error is None else str(error),
            details=_details(obj, "details", problems),
            extra={k: v for k, v in obj.items() if k not in ATTEMPT_FIELDS},
        )
        problems.extend(attempt.problems(as_result=as_result))
        return attempt, problems

    @classmethod
    def loads(cls, data: bytes | str, *, as_result: bool = False) -> tuple[Attempt, list[str]]:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecordError(f"attempt is not JSON: {exc}") from None
        return cls.from_json(obj, as_result=as_result)
