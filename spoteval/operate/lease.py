"""One operator at a time: the operator lease in the run record.

Every operator run takes the run's lease before it acts on a node: `scripts.operate` with or without
`--once` (on a laptop, a scheduler, an always-on machine), and the drill's operator. A run that finds
the lease held by another only reads, and says so in one line. Layout (every object create-only,
never changed or deleted; readers that do not know the prefix ignore it):

    runs/{run_id}/operator-lease/{k:08d}.json     k = 0, 1, 2 ...: the lease's history, one object a turn

Object k is `{run_id, k, holder, host, pid, time, ttl_s, renew_s, end, took_over, nonce}`:

- a run *takes* the lease by creating the object after the latest one, naming itself (`holder`), and
  *renews* it by creating the next one every `renew_s` (a quarter of `ttl_s`) while it holds it;
- `end` is set on the last object of a turn: `released` (the holder stopped in order: the next run
  takes the lease at once) or `finished` (every episode of the run has its result and every node is
  settled: the next run exits at once);
- `took_over` `{holder, k, reason, age_s}`: this object took the lease from `holder`, whose latest
  object `k` was older than its `ttl_s` (`reason: expired`: the holder was killed, or lost the store)
  or did not parse (`unreadable`).

Why two operators never act at once:

1. Create-only decides every turn: of several runs creating object k+1 (two takers, or a taker and a
   late renewal) exactly one succeeds (S3 and Azure `If-None-Match: *`, GCS `ifGenerationMatch=0`, an
   exclusive local create); the others read what is there and decide again.
2. A holder acts only while its latest renewal began less than `ttl_s / 2` ago (its own monotonic
   clock), and before each start or stop it checks that object k+1 does not exist (one HEAD): a
   holder that was taken over learns it at its next renewal or action, and stops acting.
3. A reader takes a lease over once the latest object is older than that object's `ttl_s` by the
   reader's wall clock (`time` is the holder's wall clock when it began writing it). Since the holder
   stopped acting `ttl_s / 2` after it began that write, clocks that differ by less than `ttl_s / 2`
   (60 s at the default `ttl_s` of 120 s) cannot make two holders act at once; a larger skew can end
   a live holder's turn early, and rule 2 then stops it before its next action (one already under
   way, such as a start waiting for capacity, still finishes). (Short-lived `--once`
   runs remember nothing between runs, so a watch on the reader's own clock, as the pool's leases
   use, is not available to them.)
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from spoteval.claims.io import StoreLike, create, first_missing
from spoteval.claims.model import loads_object
from spoteval.record import RecordError, check_id, format_time, node_segment, parse_time, utc_now
from spoteval.store import StoreError

DEFAULT_TTL_S: Final = 120.0
MIN_TTL_S: Final = 2.0
ENDS: Final = frozenset({"released", "finished"})

#: What a run finds when it looks at the lease.
HELD: Final = "held"  # this run holds it
OTHER: Final = "other"  # another run holds it, and its latest object is younger than its ttl
FREE: Final = "free"  # nobody holds it (never taken, released, or expired): the next run takes it
FINISHED: Final = "finished"  # the run is finished: nothing to operate


def lease_prefix(run_id: str) -> str:
    return f"runs/{check_id(run_id, 'run_id')}/operator-lease/"


def holder_name(kind: str = "operator") -> str:
    """A holder id unique to this process: `{kind}-{host}-{pid}-{random}` (for people to read)."""
    host = node_segment(socket.gethostname() or "host")[:60]
    return check_id(f"{kind}-{host}-{os.getpid()}-{secrets.token_hex(3)}", "holder")


@dataclass(frozen=True)
class LeaseObject:
    """Object k of a run's operator lease."""

    run_id: str
    k: int
    holder: str
    time: str  # the holder's wall clock when it began writing this object (RFC 3339 UTC)
    ttl_s: float
    renew_s: float
    host: str = ""
    pid: int = 0
    end: str | None = None  # released | finished (the last object of a turn)
    took_over: Mapping[str, Any] | None = None  # {holder, k, reason, age_s}
    nonce: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.end is not None and self.end not in ENDS:
            raise RecordError(f"unknown lease end {self.end!r}")
        return {
            "run_id": self.run_id,
            "k": self.k,
            "holder": self.holder,
            "host": self.host,
            "pid": self.pid,
            "time": self.time,
            "ttl_s": self.ttl_s,
            "renew_s": self.renew_s,
            "end": self.end,
            "took_over": None if self.took_over is None else dict(self.took_over),
            "nonce": self.nonce,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LeaseObject:
        """Strict on what the rules use (holder, k, time, ttl_s, end), lenient on the rest."""
        holder, k, ttl = obj.get("holder"), obj.get("k"), obj.get("ttl_s")
        if not isinstance(holder, str) or not holder:
            raise RecordError(f"holder {holder!r} is not a non-empty string")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise RecordError(f"k {k!r} is not an integer >= 0")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise RecordError(f"ttl_s {ttl!r} is not a positive number")
        parse_time(obj.get("time"))  # type: ignore[arg-type]
        end = obj.get("end")
        if end is not None and end not in ENDS:
            raise RecordError(f"end {end!r} is not one of {', '.join(sorted(ENDS))}")
        took = obj.get("took_over")
        renew = obj.get("renew_s")
        pid = obj.get("pid")
        return cls(
            run_id=str(obj.get("run_id", "")),
            k=k,
            holder=holder,
            time=str(obj["time"]),
            ttl_s=float(ttl),
            renew_s=float(renew) if isinstance(renew, int | float) and not isinstance(renew, bool) else 0.0,
            host=str(obj.get("host", "")),
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
            end=end,
            took_over=dict(took) if isinstance(took, Mapping) else None,
            nonce=str(obj.get("nonce", "")),
        )

    def age_s(self, now: datetime) -> float:
        return (now - parse_time(self.time)).total_seconds()


def judge(latest: LeaseObject | None, now: datetime, *, unreadable: bool = False) -> str:
    """What the latest object says to a run that does not hold the lease (a pure function):
    FINISHED, OTHER (held and younger than its ttl), or FREE (none yet, released, expired, or an
    object that does not parse: a correct holder never writes one)."""
    if latest is None:
        return FREE
    if latest.end == "finished":
        return FINISHED
    if latest.end == "released" or unreadable:
        return FREE
    return FREE if latest.age_s(now) >= latest.ttl_s else OTHER


@dataclass(frozen=True)
class Standing:
    """The lease as one run found it: who holds it and how fresh its latest object is."""

    kind: str  # HELD, OTHER, FREE, FINISHED
    run_id: str
    latest: LeaseObject | None = None
    age_s: float | None = None  # of the latest object, by this run's wall clock
    problem: str | None = None  # the latest object did not parse (it is taken over)

    @property
    def took_over(self) -> Mapping[str, Any] | None:
        return self.latest.took_over if self.kind == HELD and self.latest is not None else None

    def line(self) -> str:
        """The one line a run says about the lease."""
        latest = self.latest
        if self.kind == OTHER and latest is not None:
            return (
                f"run {self.run_id}: operator {latest.holder} holds the lease (renewed "
                f"{max(0.0, self.age_s or 0.0):.0f} s ago, expires {latest.ttl_s:g} s after its last "
                "renewal): this one only reads"
            )
        if self.kind == FINISHED and latest is not None:
            return (
                f"run {self.run_id} is finished: every episode has its result and every node is "
                f"settled ({latest.holder}, {latest.time}): nothing to operate"
            )
        took = self.took_over
        if self.kind == HELD and took:
            return (
                f"run {self.run_id}: took the operator lease from {took.get('holder')} "
                f"({took.get('reason')}: silent {float(took.get('age_s') or 0):.0f} s, past its ttl)"
            )
        if self.kind == HELD and latest is not None:
            return f"run {self.run_id}: {latest.holder} took the operator lease"
        return f"run {self.run_id}: {self.summary()}"

    def summary(self) -> str:
        """The lease for `status`: who holds it, or why nobody does."""
        latest = self.latest
        if latest is None:
            return "no operator has taken the lease" + (f" ({self.problem})" if self.problem else "")
        age = max(0.0, self.age_s or 0.0)
        if self.kind in (HELD, OTHER):
            return f"{latest.holder} holds the lease (renewed {age:.0f} s ago, ttl {latest.ttl_s:g} s)"
        if self.kind == FINISHED:
            return f"the run is finished ({latest.holder} at {latest.time}): operators exit at once"
        if latest.end == "released":
            return f"no operator holds the lease ({latest.holder} released it at {latest.time})"
        if self.problem:
            return f"no operator holds the lease ({self.problem})"
        silent = f"{latest.holder} fell silent {age:.0f} s ago, past its ttl {latest.ttl_s:g} s"
        return f"no operator holds the lease ({silent})"

    def to_json(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "lease": self.kind,
            "holder": latest.holder if latest else None,
            "k": latest.k if latest else None,
            "time": latest.time if latest else None,
            "age_s": None if self.age_s is None else round(self.age_s, 3),
            "ttl_s": latest.ttl_s if latest else None,
            "end": latest.end if latest else None,
            "problem": self.problem,
        }


class OperatorLease:
    """One run's side of the lease: look, take, keep (renew), confirm before acting, let go.

    `wall` stamps the objects and judges other holders' age; `mono` times this holder's own
    renewals. With `keeper` a daemon thread renews the lease while it is held (a start can wait
    for capacity far longer than the ttl); without one, `tick()` renews when due (tests, loops that
    call it often)."""

    def __init__(
        self,
        store: StoreLike,
        run_id: str,
        *,
        holder: str | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        wall: Callable[[], datetime] = utc_now,
        mono: Callable[[], float] = time.monotonic,
        keeper: bool = True,
    ) -> None:
        if not math.isfinite(ttl_s) or ttl_s < MIN_TTL_S:
            raise ValueError(f"lease ttl {ttl_s!r} must be at least {MIN_TTL_S:g} s")
        self.store = store
        self.run_id = run_id
        self.prefix = lease_prefix(run_id)
        self.holder = holder or holder_name()
        self.ttl_s = float(ttl_s)
        self.renew_s = self.ttl_s / 4
        self.wall = wall
        self.mono = mono
        self.keeper = keeper
        self.problems: list[str] = []  # renewals that failed (the store did not answer)
        self._known = 0  # objects < _known exist
        self._mine: LeaseObject | None = None  # our latest object while we hold the lease
        self._renewed = -math.inf  # our clock when our latest successful write began
        self._lost: Standing | None = None  # another run took the lease from us
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def key(self, k: int) -> str:
        return f"{self.prefix}{k:08d}.json"

    # --- looking ----------------------------------------------------------------------------------

    def _read(self, k: int) -> tuple[LeaseObject | None, str | None]:
        data = self.store.get(self.key(k))
        if data is None:
            return None, f"{self.key(k)}: missing"
        try:
            return LeaseObject.from_json(loads_object(data)), None
        except RecordError as exc:
            return None, f"{self.key(k)}: {exc}"

    def _latest(self) -> tuple[int, LeaseObject | None, str | None]:
        """The index of the latest object (-1: none yet), the object, and what is wrong with it."""
        n = first_missing(lambda i: self.store.exists(self.key(i)), self._known)
        self._known = n
        if n == 0:
            return -1, None, None
        obj, problem = self._read(n - 1)
        return n - 1, obj, problem

    def _standing(self, k: int, obj: LeaseObject | None, problem: str | None) -> Standing:
        now = self.wall()
        if obj is not None and obj.holder == self.holder and obj.end is None and self._lost is None:
            return Standing(HELD, self.run_id, obj, obj.age_s(now))
        kind = judge(obj, now, unreadable=problem is not None and k >= 0)
        return Standing(kind, self.run_id, obj, obj.age_s(now) if obj else None, problem)

    def peek(self) -> Standing:
        """The lease as it stands; writes nothing (the `status` command)."""
        with self._lock:
            k, obj, problem = self._latest()
            return self._standing(k, obj, problem)

    # --- taking and keeping -----------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """We hold the lease and may act: our latest renewal began less than ttl / 2 ago."""
        with self._lock:
            return (
                self._mine is not None and self._lost is None and self.mono() - self._renewed < self.ttl_s / 2
            )

    def _object(
        self, k: int, *, end: str | None = None, took: Mapping[str, Any] | None = None
    ) -> LeaseObject:
        return LeaseObject(
            run_id=self.run_id,
            k=k,
            holder=self.holder,
            time=format_time(self.wall()),
            ttl_s=self.ttl_s,
            renew_s=self.renew_s,
            host=socket.gethostname(),
            pid=os.getpid(),
            end=end,
            took_over=took,
            nonce=secrets.token_hex(8),
        )

    def _write(self, obj: LeaseObject) -> tuple[bool, bytes | None]:
        created, data = create(self.store, self.key(obj.k), obj.to_json())
        self._known = max(self._known, obj.k + 1)
        return created, data

    def take(self) -> Standing:
        """Take the lease (or keep it, when we hold it): HELD, or what another run's objects say
        (OTHER, FINISHED). Create-only decides every race; a lost race is decided again."""
        with self._lock:
            if self._mine is not None and self._lost is None:
                self.tick()
                if self._mine is not None and self._lost is None:
                    return Standing(HELD, self.run_id, self._mine, 0.0)
            for _ in range(16):
                k, obj, problem = self._latest()
                standing = self._standing(k, obj, problem)
                if standing.kind in (OTHER, FINISHED):
                    return standing
                if standing.kind == HELD:  # our own object (a write whose reply was lost)
                    self._mine, self._renewed, self._lost = obj, self.mono(), None
                    return standing
                took: dict[str, Any] | None = None
                if problem is not None:
                    took = {"holder": None, "k": k, "reason": "unreadable", "age_s": None}
                elif obj is not None and obj.end is None:
                    took = {"holder": obj.holder, "k": k, "reason": "expired", "age_s": standing.age_s}
                began = self.mono()
                mine = self._object(k + 1, took=took)
                created, _ = self._write(mine)
                if created:
                    self._mine, self._renewed, self._lost = mine, began, None
                    self._start_keeper()
                    return Standing(HELD, self.run_id, mine, 0.0)
            raise StoreError(f"{self.store!r}: the operator lease under {self.prefix} kept changing")

    def tick(self) -> None:
        """Renew the lease when a renewal is due (the keeper calls this; so does every check)."""
        with self._lock:
            if self._mine is None or self._lost is not None:
                return
            if self.mono() - self._renewed < self.renew_s:
                return
            began = self.mono()
            mine = self._object(self._mine.k + 1)
            try:
                created, data = self._write(mine)
            except StoreError as exc:
                self.problems.append(str(exc))
                return
            if created:
                self._mine, self._renewed = mine, began
            else:
                self._taken_from_us(mine.k, data)

    def _taken_from_us(self, k: int, data: bytes | None) -> None:
        other: LeaseObject | None = None
        if data is not None:
            try:
                other = LeaseObject.from_json(loads_object(data))
            except RecordError:
                other = None
        self._lost = Standing(OTHER, self.run_id, other, other.age_s(self.wall()) if other else None)
        self._mine = None

    def confirm(self) -> bool:
        """Just before a start or a stop: we hold the lease and nobody has written after our latest
        object (one HEAD). False tells the caller not to act."""
        with self._lock:
            if not self.held:
                return False
            assert self._mine is not None
            nxt = self._mine.k + 1
            if self.store.exists(self.key(nxt)):
                self._taken_from_us(nxt, self.store.get(self.key(nxt)))
                return False
            return True

    @property
    def lost(self) -> Standing | None:
        """Who took the lease from us, when another run did."""
        return self._lost

    def release(self, *, finished: bool = False) -> None:
        """End our turn: `released` (the next run takes the lease at once) or `finished` (the run
        is done: the next run exits at once). Nothing to do when we do not hold it."""
        self._stop_keeper()
        with self._lock:
            if self._mine is None or self._lost is not None:
                return
            end = self._object(self._mine.k + 1, end="finished" if finished else "released")
            created, data = self._write(end)
            if created:
                self._mine = None
            else:
                self._taken_from_us(end.k, data)

    # --- the keeper thread ------------------------------------------------------------------------

    def _start_keeper(self) -> None:
        if not self.keeper or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, name="operator-lease", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(min(self.renew_s / 4, 5.0)):
            self.tick()
            if self._mine is None:
                return

    def _stop_keeper(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self._thread = None


def read_objects(store: StoreLike, run_id: str) -> list[dict[str, Any]]:
    """Every object of the run's operator lease, in order (for tests and reports)."""
    prefix = lease_prefix(run_id)
    out: list[dict[str, Any]] = []
    for key in store.list(prefix):
        data = store.get(key)
        if data is not None:
            try:
                out.append(loads_object(data))
            except RecordError:
                out.append({"key": key, "problem": "does not parse"})
    return out


__all__ = [
    "DEFAULT_TTL_S",
    "FINISHED",
    "FREE",
    "HELD",
    "OTHER",
    "LeaseObject",
    "OperatorLease",
    "Standing",
    "holder_name",
    "judge",
    "lease_prefix",
    "read_objects",
]
