"""What in the run record is private (the user's account, capacity and spending), and the shared
view of an event, with identifiers replaced by aliases and prices removed (spoteval/record.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from spoteval.record import Event, format_time

#: Event fields that identify the user's account, capacity or spending: never in a shared report.
PRIVATE_EVENT_FIELDS: Final = ("run_id", "node", "zone", "price_per_hour")
#: Keys inside `details` that hold identifiers (instance ids, addresses, buckets, accounts).
PRIVATE_DETAIL_KEYS: Final = frozenset(
    {
        "instance_id",
        "address",
        "public_ip",
        "private_ip",
        "old_address",
        "new_address",
        "address_before",
        "address_after",
        "ip",
        "url",
        "health_url",
        "node_id",
        "node_ids",
        "instance_ids",
        "bucket",
        "bucket_url",
        "store",
        "account",
        "account_id",
        "project",
        "subscription",
        "resource_group",
        "hostname",
        "pod",
        "price",
        "cost",
    }
)


def private_identifiers(event: Event) -> set[str]:
    """Every string in an event that a shared report must not carry."""
    found: set[str] = {event.run_id, event.node}
    if event.zone:
        found.add(event.zone)

    def walk(value: object, private: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, private or k in PRIVATE_DETAIL_KEYS)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, private)
        elif private and isinstance(value, str) and value:
            found.add(value)

    walk(event.details, False)
    return {s for s in found if s}


def redact_event(event: Event, *, alias: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A shared view of an event: identifiers replaced by stable aliases, prices removed."""
    alias = dict(alias or {})

    def name(value: str | None, prefix: str) -> str | None:
        if value is None:
            return None
        if value not in alias:
            alias[value] = f"{prefix}-{sum(1 for a in alias.values() if a.startswith(prefix)) + 1}"
        return alias[value]

    def scrub(value: object) -> object:
        if isinstance(value, Mapping):
            return {k: scrub(v) for k, v in value.items() if k not in PRIVATE_DETAIL_KEYS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return {
        "time": format_time(event.time),
        "node": name(event.node, "node"),
        "kind": event.kind,
        "reason": event.reason,
        "provider": event.provider,
        "region": event.region,
        "instance_type": event.instance_type,
        "market": event.market,
        "details": scrub(dict(event.details)),
    }
