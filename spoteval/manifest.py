"""The run's manifest (`runs/{run_id}/manifest.jsonl`): one JSON object per line, one episode each.

Each line is `{"id": "...", ...params}`; ids follow the record's id rule (`record.check_id`) and may
not repeat. Parsing raises `RecordError` naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spoteval.record import RecordError, check_id


@dataclass(frozen=True)
class ManifestEntry:
    id: str
    params: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, **self.params}


def parse_manifest(text: str) -> list[ManifestEntry]:
    """Parse manifest.jsonl; raises RecordError naming the line for a bad or repeated id."""
    entries: list[ManifestEntry] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise RecordError(f"manifest line {n}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"manifest line {n}: not a JSON object")
        try:
            episode_id = check_id(obj.get("id"), "id")
        except RecordError as exc:
            raise RecordError(f"manifest line {n}: {exc}") from None
        if episode_id in seen:
            raise RecordError(f"manifest line {n}: id {episode_id!r} appears twice")
        seen.add(episode_id)
        entries.append(ManifestEntry(episode_id, {k: v for k, v in obj.items() if k != "id"}))
    if not entries:
        raise RecordError("manifest has no episodes")
    return entries


def dump_manifest(entries: Iterable[ManifestEntry]) -> bytes:
    return "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in entries).encode()
