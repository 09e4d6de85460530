"""What each provider records of its own interruptions and state changes, and where spot-eval reads
it: a view, by provider key, of the `EVENTS` fact of each provider's module (spoteval/providers/),
where every fact has its `Source` (the page it was checked against, the date). A provider that keeps
no history spot-eval can read has an empty entry here (no capture, no reader) with the source that
says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers import REGISTRY, EventHistory
from spoteval.providers.base import no_event_history

__all__ = ["EVENT_HISTORY", "EventHistory"]

EVENT_HISTORY: Final[Mapping[str, EventHistory]] = {
    key: p.EVENTS if isinstance(p.EVENTS, EventHistory) else no_event_history(p.EVENTS.source)
    for key, p in REGISTRY.items()
}
