"""Shared pieces of the operator tests: a run record in a file:// store, a clock the tests move."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from spoteval.operate.journal import journal_prefix
from spoteval.record import Event, RunLayout
from spoteval.store import Store

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


@dataclass
class Clock:
    """A clock that moves only when the operator sleeps (or the test says so)."""

    now: datetime = T0 + timedelta(minutes=30)
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Record:
    """A run's record in a store: manifest, results and events, written as the agent writes them."""

    def __init__(self, store_url: str, run_id: str = "r1") -> None:
        self.store = Store(store_url)
        self.layout = RunLayout(run_id)
        self.run_id = run_id
        self._seq = 0

    def manifest(self, ids: Sequence[str], done: Sequence[str] = ()) -> None:
        self.store.put(self.layout.manifest, "".join(json.dumps({"id": i}) + "\n" for i in ids).encode())
        for episode in done:
            self.store.put(self.layout.result(episode), json.dumps({"episode_id": episode}).encode())

    def event(
        self,
        minutes: float,
        node: str,
        kind: str,
        reason: str | None = None,
        price: float | None = 0.5,
        **details: Any,
    ) -> None:
        time = T0 + timedelta(minutes=minutes)
        event = Event(
            time=time,
            run_id=self.run_id,
            node=node,
            kind=kind,
            reason=reason,
            provider="gcp",
            market="spot",
            price_per_hour=price,
            currency="USD" if price is not None else None,
            price_source="configured" if price is not None else "unknown",
            details={"incarnation": "inc-1", **details},
        )
        self._seq += 1
        self.store.put(self.layout.event(time, node, self._seq), event.dumps())

    def taken(self, node: str, *, hours: float = 0.0) -> None:
        """An agent that started, beat its heart, and saw the provider's notice (the node is gone)."""
        self.event(0, node, "start", "initial", heartbeat_s=30)
        self.event(max(10.0, hours * 60 - 1), node, "heartbeat")
        self.event(max(20.0, hours * 60), node, "notice", "preempted")

    def events(self) -> list[Event]:
        out = []
        for key in self.store.list(self.layout.events_prefix):
            data = self.store.get(key)
            assert data is not None
            out.append(Event.loads(data)[0])
        return sorted(out, key=lambda e: e.time)

    def operator_events(self) -> list[Event]:
        return [e for e in self.events() if e.details.get("source") == "operator"]

    def notes(self) -> list[dict[str, Any]]:
        keys = self.store.list(journal_prefix(self.layout))
        return [json.loads(self.store.get(k) or b"null") for k in keys]

    def keys(self) -> list[str]:
        return self.store.list(self.layout.prefix)
