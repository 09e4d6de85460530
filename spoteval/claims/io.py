"""Store access for the claims protocol: create-or-same writes, prefix-closed sequences, counting.

`StoreLike` is the part of `spoteval.store.Store` the protocol uses; `Counting` wraps a store and
counts requests by kind (the benchmark and the tests read the counts).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from spoteval.claims.model import dumps


class StoreLike(Protocol):
    def get(self, key: str) -> bytes | None: ...
    def exists(self, key: str) -> bool: ...
    def put_new(self, key: str, data: bytes) -> bool: ...
    def list(self, prefix: str) -> list[str]: ...


class Counting:
    """A store that counts its requests: `get`, `head`, `put` (create-only) and `list` calls."""

    def __init__(self, store: StoreLike) -> None:
        self.store = store
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def get(self, key: str) -> bytes | None:
        self._count("get")
        return self.store.get(key)

    def exists(self, key: str) -> bool:
        self._count("head")
        return self.store.exists(key)

    def put_new(self, key: str, data: bytes) -> bool:
        self._count("put")
        return self.store.put_new(key, data)

    def list(self, prefix: str) -> list[str]:
        self._count("list")
        return self.store.list(prefix)

    @property
    def objects_read(self) -> int:
        """GET and HEAD requests (a listing is counted apart)."""
        return self.counts["get"] + self.counts["head"]


def create(store: StoreLike, key: str, doc: Mapping[str, Any]) -> tuple[bool, bytes | None]:
    """Create-only write of a document carrying a `nonce`: (True, None) if this call created it, or
    (False, bytes) with what the key holds. A write whose reply was lost and that the client retried
    finds its own object: that counts as created (same nonce)."""
    if store.put_new(key, dumps(doc)):
        return True, None
    data = store.get(key)
    if data is not None and doc.get("nonce"):
        try:
            other = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            other = None
        if isinstance(other, dict) and other.get("nonce") == doc["nonce"]:
            return True, None
    return False, data


def first_missing(exists: Callable[[int], bool], known: int = 0) -> int:
    """The first index whose object is missing, in a prefix-closed sequence (object i is created only
    after i - 1 exists) of which indices < `known` are known to exist: O(log distance) probes."""
    low = known  # invariant: every index < low exists
    step = 1
    high = None
    probe = low
    while high is None:
        if exists(probe):
            low = probe + 1
            probe = low + step
            step *= 2
        else:
            high = probe
    # indices < low exist, `high` is missing: binary search in [low, high)
    while low < high:
        mid = (low + high) // 2
        if exists(mid):
            low = mid + 1
        else:
            high = mid
    return low
