"""Pure parts of the claims protocol: object keys, documents, and the state a chunk's log spells.

Nothing here does I/O. `ChunkLog.apply` replays a chunk's create-only log entries in order and
yields, for each episode of the chunk, its owner and whether the owner has started it; every node
that reads the same entries computes the same state (see the package docstring for the rules).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.record import RecordError, check_id, node_segment

VERSION: Final = 1
OPS: Final = frozenset({"claim", "start", "steal", "takeover", "done"})
END_REASONS: Final = frozenset({"released", "expired", "replaced"})
Ranges = list[list[int]]


class ClaimsError(ValueError):
    """A claims object that must not be written (a bug), or a run whose plan cannot be used."""


# --- keys ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolLayout:
    """Object keys of a run's pool, relative to the store's root (all under `runs/{run}/pool/`)."""

    run_id: str

    def __post_init__(self) -> None:
        check_id(self.run_id, "run_id")

    @property
    def prefix(self) -> str:
        return f"runs/{self.run_id}/pool/"

    @property
    def plan(self) -> str:
        return f"{self.prefix}plan.json"

    def chunk(self, c: int, m: int) -> str:
        return f"{self.prefix}chunks/{c:08d}/{m:06d}.json"

    def chunks_prefix(self) -> str:
        return f"{self.prefix}chunks/"

    def lease(self, holder: str, k: int) -> str:
        return f"{self.prefix}leases/{check_id(holder, 'holder')}/{k:08d}.json"

    def holder(self, i: int) -> str:
        return f"{self.prefix}holders/{i:08d}.json"

    def summary(self, n: int) -> str:
        return f"{self.prefix}summaries/{n:08d}.json"


def holder_id(node: str, incarnation: str, generation: int = 1) -> str:
    """A lease holder: one incarnation of one node (a new id after the holder was fenced)."""
    base = f"{node_segment(node)[:200]}.{incarnation}"
    return check_id(base if generation == 1 else f"{base}-{generation}", "holder")


def manifest_digest(episodes: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(episodes).encode()).hexdigest()


def dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def loads_object(data: bytes) -> dict[str, Any]:
    """A JSON object, or RecordError naming what is wrong."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"not a JSON object: {type(obj).__name__}")
    return obj


def _int(obj: Mapping[str, Any], key: str, low: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RecordError(f"{key} {value!r} is not an integer >= {low}")
    return value


def _num(obj: Mapping[str, Any], key: str) -> float:
    value = obj.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise RecordError(f"{key} {value!r} is not a positive number")
    return float(value)


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise RecordError(f"{key} {value!r} is not a non-empty string")
    return value


# --- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The run's pool parameters, fixed by the first node that wrote `plan.json` (create-only)."""

    episodes: int
    batch: int
    renew_s: float
    expiry_s: float
    manifest_sha256: str
    created: str = ""
    by: str = ""

    @property
    def chunks(self) -> int:
        return math.ceil(self.episodes / self.batch)

    def chunk_of(self, index: int) -> int:
        return index // self.batch

    def span(self, c: int) -> range:
        """Manifest indices of chunk `c`."""
        return range(c * self.batch, min(self.episodes, (c + 1) * self.batch))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "episodes": self.episodes,
            "batch": self.batch,
            "renew_s": self.renew_s,
            "expiry_s": self.expiry_s,
            "manifest_sha256": self.manifest_sha256,
            "created": self.created,
            "by": self.by,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Plan:
        plan = cls(
            episodes=_int(obj, "episodes", 1),
            batch=_int(obj, "batch", 1),
            renew_s=_num(obj, "renew_s"),
            expiry_s=_num(obj, "expiry_s"),
            manifest_sha256=_str(obj, "manifest_sha256"),
            created=str(obj.get("created", "")),
            by=str(obj.get("by", "")),
        )
        if plan.expiry_s < 2 * plan.renew_s:
            raise RecordError(f"expiry_s {plan.expiry_s} is less than twice renew_s {plan.renew_s}")
        return plan


# --- leases -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """Object k of a holder's lease stream: a renewal carrying the holder's state, or its end."""

    holder: str
    k: int
    node: str
    time: str
    state: Mapping[str, Any] = field(default_factory=dict)
    end: str | None = None  # released (by the holder), expired or replaced (by another node)
    by: str | None = None  # who wrote an end
    nonce: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.end is not None and self.end not in END_REASONS:
            raise ClaimsError(f"unknown lease end {self.end!r}")
        return {
            "holder": self.holder,
            "k": self.k,
            "node": self.node,
            "time": self.time,
            "state": dict(self.state),
            "end": self.end,
            "by": self.by,
            "nonce": self.nonce,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Lease:
        end = obj.get("end")
        if end is not None and end not in END_REASONS:
            raise RecordError(f"end {end!r} is not one of {', '.join(sorted(END_REASONS))}")
        state = obj.get("state", {})
        by = obj.get("by")
        return cls(
            holder=_str(obj, "holder"),
            k=_int(obj, "k"),
            node=str(obj.get("node", "")),
            time=str(obj.get("time", "")),
            state=state if isinstance(state, dict) else {},
            end=end,
            by=by if isinstance(by, str) else None,
            nonce=str(obj.get("nonce", "")),
        )


# --- chunk logs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """Entry m of a chunk's log. `ranges` are [a, b) offsets inside the chunk."""

    op: str
    holder: str
    node: str = ""
    ranges: tuple[tuple[int, int], ...] = ()
    source: str | None = None  # steal, takeover: whose episodes; None takes over what nobody owns
    lease: int = 0  # the holder's lease index when it wrote the entry (a hint for readers)
    time: str = ""
    nonce: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.op not in OPS:
            raise ClaimsError(f"unknown claims op {self.op!r}")
        return {
            "op": self.op,
            "holder": self.holder,
            "node": self.node,
            "ranges": [list(r) for r in self.ranges],
            "from": self.source,
            "lease": self.lease,
            "time": self.time,
            "nonce": self.nonce,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Entry:
        op = obj.get("op")
        if op not in OPS:
            raise RecordError(f"op {op!r} is not one of {', '.join(sorted(OPS))}")
        raw = obj.get("ranges", [])
        if not isinstance(raw, list):
            raise RecordError("ranges is not a list")
        ranges: list[tuple[int, int]] = []
        for r in raw:
            if (
                not isinstance(r, list)
                or len(r) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in r)
                or not 0 <= r[0] <= r[1]
            ):
                raise RecordError(f"range {r!r} is not [a, b] with 0 <= a <= b")
            ranges.append((r[0], r[1]))
        source = obj.get("from")
        if source is not None and not isinstance(source, str):
            raise RecordError(f"from {source!r} is not a string")
        lease = obj.get("lease", 0)
        return cls(
            op=str(op),
            holder=_str(obj, "holder"),
            node=str(obj.get("node", "")),
            ranges=tuple(ranges),
            source=source,
            lease=lease if isinstance(lease, int) and not isinstance(lease, bool) else 0,
            time=str(obj.get("time", "")),
            nonce=str(obj.get("nonce", "")),
        )


def to_ranges(offsets: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted offsets as [a, b) runs: (0, 1, 2, 5) -> ((0, 3), (5, 6))."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(offsets)):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return tuple(out)


def in_ranges(ranges: Iterable[tuple[int, int]], size: int) -> list[int]:
    return [i for a, b in ranges for i in range(a, min(b, size))]


@dataclass
class ChunkLog:
    """A chunk's log as one node knows it: the entries read so far and the state they spell.

    Rules, applied in log order (the same for every reader):
    - entry 0 `claim` by H: H owns every offset; `ranges` (optional) are started at once.
      Entry 0 that is not a claim or does not parse: every offset is owned by nobody.
    - `start` by H: offsets in `ranges` that H owns become started.
    - `steal` by T from F: offsets in `ranges` owned by F and not started become T's, started.
    - `takeover` by T from F (F's lease has ended; F None: offsets nobody owns): every offset F
      owns becomes T's, not started (T starts what has no result); of those, the offsets in
      `ranges` become started at once (T settles them: their outcome is recorded already, or T runs
      them on itself), so nobody can steal them.
    - `done` by H: offsets in `ranges` have their result in the store (written once they are
      durable, so later readers need not look for them one by one).
    Entries that do not parse, or a `claim` after entry 0, change nothing and are reported.
    """

    c: int
    size: int
    entries: list[Entry | None] = field(default_factory=list)  # None: an entry that did not parse
    owner: list[str | None] = field(default_factory=list)
    started: list[bool] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.owner:
            self.owner = [None] * self.size
            self.started = [False] * self.size
            self.complete = [False] * self.size

    @property
    def length(self) -> int:
        return len(self.entries)

    def apply(self, entry: Entry | None, problem: str | None = None) -> None:
        m = len(self.entries)
        self.entries.append(entry)
        if entry is None:
            self.problems.append(problem or f"chunk {self.c} entry {m} does not parse")
            return
        offsets = range(self.size)
        if entry.op == "claim":
            if m != 0:
                self.problems.append(f"chunk {self.c} entry {m}: a claim after entry 0 is ignored")
                return
            self.owner = [entry.holder] * self.size
            for i in in_ranges(entry.ranges, self.size):
                self.started[i] = True
        elif entry.op == "start":
            for i in in_ranges(entry.ranges, self.size):
                if self.owner[i] == entry.holder:
                    self.started[i] = True
        elif entry.op == "steal":
            for i in in_ranges(entry.ranges, self.size):
                if self.owner[i] == entry.source and not self.started[i] and entry.source != entry.holder:
                    self.owner[i], self.started[i] = entry.holder, True
        elif entry.op == "takeover":
            moved = [i for i in offsets if self.owner[i] == entry.source and not self.complete[i]]
            for i in moved:
                self.owner[i], self.started[i] = entry.holder, False
            for i in set(in_ranges(entry.ranges, self.size)) & set(moved):
                self.started[i] = True
        elif entry.op == "done":
            for i in in_ranges(entry.ranges, self.size):
                self.complete[i] = True

    def owned_by(self, holder: str | None) -> list[int]:
        """Offsets the holder owns that are not complete."""
        return [i for i, o in enumerate(self.owner) if o == holder and not self.complete[i]]

    def unstarted(self, holder: str | None) -> list[int]:
        return [i for i in self.owned_by(holder) if not self.started[i]]

    def holders(self) -> set[str]:
        """Holders that own offsets not complete."""
        return {o for o, done in zip(self.owner, self.complete, strict=True) if o is not None and not done}


def parse_entry(data: bytes, where: str) -> tuple[Entry | None, str | None]:
    try:
        return Entry.from_json(loads_object(data)), None
    except RecordError as exc:
        return None, f"{where}: {exc}"
