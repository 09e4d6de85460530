"""Spool-first uploads: every record object is written to a local spool file, then to the store.
(The items and their spool files: spoteval/agent/items.py.)

Each item (an event, or an ended attempt with or without its final result) is first written to
`{spool_dir}/{run_id}/` (atomically: temporary file + rename), then uploaded by a small pool of
threads with create-only writes. The spool file is removed only once the store holds the object,
so an agent killed at any moment, or a store that does not answer for an hour, loses nothing that
the local disk keeps: the next incarnation on the same disk uploads what is left (`load_spool`).

- Events: `put_new` under their key; a key that exists with the same content is done (an earlier
  upload whose spool file was not yet removed), with other content the event takes the next `seq`.
- Attempts: `put_new` at `attempts/{episode}/{n}.json`; if `n` is taken by a different attempt
  (another writer), the attempt takes the next free number. Then, for a final attempt, the result
  goes to `results/{episode}.json` create-only; losing that race is not an error (the first result
  stands, and this attempt is still recorded under attempts/).
- Order: events that decide what happens (start, notice, stop, ...) first, then attempts, then
  heartbeats, so after an outage results go before the heartbeats that piled up. A heartbeat that
  waits is replaced by a newer one from the same node (each lists everything still in flight, so the
  newest says all the older ones did): during an outage the spool holds one heartbeat, not one per
  period.
- Durable means fsynced: `submit` returns once the spool file and its folder entry are on disk;
  inside `with uploader.batch():` the fsyncs of every item submitted are done once, as the block
  ends (a group commit: many attempts ending at once cost one flush of the disk, not one each). A
  full disk does not raise: the item is kept in memory (uploaded all the same) and `disk_full` is
  set until a spool write succeeds again, so the agent stops starting work.
- Pools: an attempt carries the lease holder it ran under, and a `Gate` (spoteval/agent/claimed.py)
  rules on it before each of its writes: `WRITE`; `HOLD` (the holder's lease is overdue, or its
  standing is not yet known): the item waits, outside the queue, and is looked at again every
  `RECHECK_S`; `GIVE_UP` (another node took the episode over when the holder's lease ended): the
  item is not written, its spool file goes, and `on_given_up` says so (the taker records that
  attempt `interrupted` from the holder's in-flight list). An attempt written but whose result is
  given up stays recorded (outcome `result_given_up`): the taker writes the result from it.
- Store errors: the item goes back to the queue and all workers back off together (0.2 s doubling
  to 5 s) until the store answers again; any exception, a `BaseException` from a panic inside
  obstore included, is such an error for the item, never the end of a worker. A permanent error
  (access denied, bad request, missing bucket) sets `fatal` and the workers stop: retrying cannot
  help, and the agent ends the run with the reason. An item the uploader cannot write at all (a
  malformed spool file) is `refused`: it stays in the spool and is never reported recorded.
  Nothing is ever deleted from the store.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

from spoteval.agent.items import ATTEMPT, EVENT, Item, fsync_folder, item_from_doc, spool_doc, write_durably
from spoteval.record import Attempt, RecordError, RunLayout, parse_time
from spoteval.store import Store, StoreError

__all__ = ["ATTEMPT", "EVENT", "GIVE_UP", "HOLD", "WRITE", "Gate", "Item", "Uploader"]

PRIORITY_EVENT: Final = 0
PRIORITY_ATTEMPT: Final = 1
PRIORITY_HEARTBEAT: Final = 2
MAX_BACKOFF_S: Final = 5.0
RECHECK_S: Final = 0.2  # held items are looked at again this often
WRITE: Final = "write"
HOLD: Final = "hold"
GIVE_UP: Final = "give_up"


Callback = Callable[[Item], None]


class Gate(Protocol):
    """Rules on a pool node's attempt before each write (see the module docstring)."""

    def verdict(self, item: Item) -> str:
        """WRITE, HOLD or GIVE_UP."""
        ...

    def written(self, item: Item, ruled: float) -> None:
        """The attempt's write that was ruled WRITE at monotonic time `ruled` has reached the store."""
        ...


class _Held(Exception):
    """The gate held the item back (not a store error)."""

    def __init__(self, verdict: str) -> None:
        super().__init__(verdict)
        self.verdict = verdict


class Uploader:
    """Spool then upload, with retries; `flush()` waits until every item is in the store."""

    def __init__(
        self,
        store: Store,
        layout: RunLayout,
        spool_dir: str,
        *,
        workers: int = 8,
        on_done: Callback | None = None,
        log: Callable[[str], None] = lambda message: None,
        gate: Gate | None = None,
        on_given_up: Callback | None = None,
    ) -> None:
        self.store, self.layout, self.spool_dir = store, layout, spool_dir
        self.on_done = on_done
        self.gate = gate
        self.on_given_up = on_given_up
        self._held: list[tuple[int, int, Item]] = []  # held back by the gate
        self._rechecked = 0.0
        self.log = log
        os.makedirs(spool_dir, exist_ok=True)
        self._queue: queue.PriorityQueue[tuple[int, int, Item]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._outstanding = 0
        self._down_until = 0.0
        self._backoff = 0.0
        self.failures = 0  # store errors seen (for reports and tests)
        self.last_error = ""
        self.refused = 0  # items that can never be uploaded (left in the spool)
        self.fatal: StoreError | None = None  # a permanent store error: uploads have stopped
        self.disk_full = False  # the last spool write found no room (the item is kept in memory)
        self._heartbeat: dict[tuple[str, str], Item] = {}  # writer -> its newest heartbeat not yet taken
        self._stopping = False
        self._batching = 0  # > 0 inside `batch()`: fsyncs wait for its end
        self._unsynced: list[str] = []
        self._threads = [
            threading.Thread(target=self._work, name=f"upload-{i}", daemon=True) for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # --- submitting ---------------------------------------------------------------------------

    def submit(self, item: Item) -> Item:
        """Spool the item (fsynced: durable on local disk when this returns, unless the disk is full),
        then queue its upload."""
        if not item.spool_path:
            name = f"{time.time_ns():020d}-{os.getpid()}-{next(self._names):08d}-{item.kind}.json"
            path = os.path.join(self.spool_dir, name)
            try:
                write_durably(path, spool_doc(item), sync=not self._batching)
                if self._batching:
                    self._unsynced.append(path)
            except OSError as exc:
                with self._lock:
                    first = not self.disk_full
                    self.disk_full = True
                if first:
                    self.log(f"spool disk full or failing ({exc.strerror or exc}): keeping objects in memory")
            else:
                item.spool_path = path
                with self._lock:
                    self.disk_full = False
        priority = PRIORITY_HEARTBEAT if item.is_heartbeat else PRIORITY_EVENT if item.kind == EVENT else 1
        older: Item | None = None
        with self._lock:
            self._outstanding += 1
            item.order = item.order or next(self._order)
            if item.is_heartbeat:
                older = self._heartbeat.get(item.writer)
                self._heartbeat[item.writer] = item
                if older is not None:
                    self._supersede(older, item)
        self._queue.put((priority, item.order, item))
        return item

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Submissions inside are durable together when the block ends (call from one thread)."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self.sync()

    def sync(self) -> None:
        """fsync the spool files written without it, then their folder (once)."""
        paths, self._unsynced = self._unsynced, []
        if not paths:
            return
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # uploaded and removed meanwhile
            try:
                os.fsync(fd)
            except OSError as exc:
                self.log(f"cannot fsync spool file {path}: {exc}")
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            fsync_folder(self.spool_dir)

    def load_spool(self) -> list[Item]:
        """Queue what a previous incarnation spooled but did not upload; returns the items."""
        items: list[Item] = []
        for name in sorted(os.listdir(self.spool_dir)):
            path = os.path.join(self.spool_dir, name)
            if name.endswith(".tmp"):
                continue  # never renamed: the write did not finish, nothing was promised
            if not name.endswith(".json"):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                item = item_from_doc(doc)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self.log(f"spool file {path} is unreadable ({exc}); left in place")
                continue
            item.spool_path = path
            items.append(self.submit(item))
        return items

    # --- waiting ------------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        with self._lock:
            return self._outstanding

    @property
    def backlog(self) -> int:
        """Objects waiting for the store, not counting the one heartbeat per node a newer replaces."""
        with self._lock:
            return self._outstanding - len(self._heartbeat)

    @property
    def store_down(self) -> bool:
        with self._lock:
            return self._down_until > time.monotonic()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted item is in the store; False if `timeout` passed first, if the
        store refuses writes for good, or if an item was refused (it is not in the store)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                if self.fatal is not None:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(min(left, 0.5) if left is not None else 0.5)
            return self.refused == 0

    def close(self) -> None:
        self._stopping = True

    # --- the workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                wait = self._down_until - time.monotonic()
                fatal = self.fatal is not None
            if fatal:  # a permanent error: nothing more goes to the store
                if self._stopping:
                    return
                time.sleep(0.5)
                continue
            if wait > 0:
                time.sleep(min(wait, 0.5))
                continue
            self._requeue_held()
            try:
                priority, order, item = self._queue.get(timeout=RECHECK_S)
            except queue.Empty:
                if self._stopping:
                    return
                continue
            with self._lock:
                if item.is_heartbeat and self._heartbeat.get(item.writer) is item:
                    del self._heartbeat[item.writer]  # taken: a newer heartbeat no longer replaces it
                skip = item.superseded
            if skip:  # a newer heartbeat, spooled already, lists all this one did (see _supersede)
                item.outcome = "superseded"
                continue
            try:
                self._upload(item)
            except _Held as held:
                self._hold(item, priority, order, held.verdict)
                continue
            except StoreError as exc:
                if exc.permanent:
                    self._fail_permanently(item, priority, order, exc)
                else:
                    self._retry(item, priority, order, str(exc))
                continue
            except (RecordError, ValueError, KeyError, TypeError) as exc:  # a malformed item
                where = item.spool_path or "(in memory)"
                self.log(f"cannot upload spooled item {where}: {exc!r}; left in the spool")
                item.outcome = "refused"
                with self._lock:
                    self.refused += 1
                self._finish(item, report=False)
                continue
            except BaseException as exc:  # a panic in obstore (or a bug) must not end the worker
                self.log(f"upload worker: {type(exc).__name__}: {exc}; the item is retried")
                self._retry(item, priority, order, f"{type(exc).__name__}: {exc}")
                continue
            with self._lock:
                if self._backoff:
                    self.log("store answers again")
                self._backoff = 0.0
            self._remove(item)
            self._finish(item, report=True)

    def _requeue_held(self) -> None:
        """Every `RECHECK_S`, the held items go back to the queue to be ruled on again."""
        now = time.monotonic()
        with self._lock:
            if not self._held or now - self._rechecked < RECHECK_S:
                return
            self._rechecked = now
            held, self._held = self._held, []
        for entry in held:
            self._queue.put(entry)

    def _hold(self, item: Item, priority: int, order: int, verdict: str) -> None:
        if verdict != GIVE_UP:
            with self._lock:
                self._held.append((priority, order, item))
            return
        item.outcome = "result_given_up" if item.attempt_written else "given_up"
        self._remove(item)
        if item.attempt_written:  # the attempt is recorded; the taker writes the result from it
            self._finish(item, report=True)
            return
        if self.on_given_up is not None:
            try:
                self.on_given_up(item)
            except Exception as exc:  # a callback must never stop the uploads
                self.log(f"upload callback failed: {exc!r}")
        self._finish(item, report=False)

    def _rule(self, item: Item) -> float:
        """The gate's verdict on the item's next write: returns when it was ruled WRITE, else raises."""
        now = time.monotonic()
        if self.gate is not None and item.holder:
            verdict = self.gate.verdict(item)
            if verdict != WRITE:
                raise _Held(verdict)
        return now

    def _retry(self, item: Item, priority: int, order: int, error: str) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = error
            if self._down_until <= time.monotonic():
                self._backoff = min(MAX_BACKOFF_S, max(0.2, self._backoff * 2))
                self._down_until = time.monotonic() + self._backoff
                self.log(f"store did not answer ({error}); retrying in {self._backoff:.1f} s")
            if item.is_heartbeat and not item.superseded:  # waiting again: the newest waiting one stays
                other = self._heartbeat.get(item.writer)
                if other is None:
                    self._heartbeat[item.writer] = item
                elif other.order > item.order:
                    self._supersede(item, other)
                else:
                    self._heartbeat[item.writer] = item
                    self._supersede(other, item)
        self._queue.put((priority, order, item))

    def _supersede(self, older: Item, newer: Item) -> None:
        """`newer` lists everything `older` did: `older` is no longer waited for (its spool file goes,
        it is skipped when a worker takes it), and it is done when `newer` is. Not when `newer` is
        only in memory (a full disk) and `older` on disk. Call with the lock held."""
        if older.spool_path and not newer.spool_path:
            return
        older.superseded = True
        newer.absorbed.extend([older, *older.absorbed])
        older.absorbed = []
        if older.spool_path:
            with contextlib.suppress(OSError):
                os.unlink(older.spool_path)
        self._outstanding -= 1
        if not self._outstanding:
            self._idle.notify_all()

    def _fail_permanently(self, item: Item, priority: int, order: int, exc: StoreError) -> None:
        with self._lock:
            first = self.fatal is None
            self.fatal = exc
            self.failures += 1
            self.last_error = str(exc)
        if first:
            self.log(f"store refuses {exc}; nothing more is sent to it (the spool keeps everything)")
        self._queue.put((priority, order, item))  # stays queued and spooled; it is not done

    def _remove(self, item: Item) -> None:
        if item.spool_path:
            with contextlib.suppress(OSError):
                os.unlink(item.spool_path)

    def _finish(self, item: Item, *, report: bool) -> None:
        """The item is done (in the store, or refused); `report` tells the agent it is in the store.
        Heartbeats it replaced are done with it."""
        for done in (item, *item.absorbed):
            done.done.set()
            if report and done is item and self.on_done is not None:
                try:
                    self.on_done(item)
                except Exception as exc:  # a callback must never stop the uploads
                    self.log(f"upload callback failed: {exc!r}")
        with self._idle:
            self._outstanding -= 1
            if not self._outstanding:
                self._idle.notify_all()

    def _upload(self, item: Item) -> None:
        if item.kind == EVENT:
            self._upload_event(item)
        elif item.kind == ATTEMPT:
            self._upload_attempt(item)
        else:
            raise ValueError(f"unknown spool item kind {item.kind!r}")

    def _same(self, key: str, payload: dict[str, Any]) -> bool:
        data = self.store.get(key)
        if data is None:
            return False
        try:
            return bool(json.loads(data) == payload)
        except ValueError:
            return False

    def _upload_event(self, item: Item) -> None:
        data = json.dumps(item.payload, sort_keys=True, separators=(",", ":")).encode()
        when = parse_time(item.key_time)
        while True:
            key = self.layout.event(when, item.node, item.seq)
            if self.store.put_new(key, data):
                item.outcome = "created"
                return
            if self._same(key, item.payload):
                item.outcome = "existed"
                return
            item.seq += 1  # the same name with other content: take the next seq

    def _upload_attempt(self, item: Item) -> None:
        episode = str(item.payload["episode_id"])
        if not item.attempt_written:
            ruled = self._rule(item)
            while True:
                n = int(item.payload["attempt"])
                key = self.layout.attempt(episode, n)
                data = json.dumps(item.payload, sort_keys=True).encode()
                if self.store.put_new(key, data):
                    item.outcome = "created"
                    break
                if self._same(key, item.payload):
                    item.outcome = "existed"
                    break
                item.payload["attempt"] = n + 1  # number taken by another attempt: the next free one
                self._respool(item)
            item.attempt_written = True
            if self.gate is not None and item.holder:
                self.gate.written(item, ruled)
        item.attempt_number = int(item.payload["attempt"])
        if item.write_result:
            self._rule(item)
            attempt, problems = Attempt.from_json(item.payload, as_result=True)
            if problems:
                raise RecordError("; ".join(problems))
            result_key = self.layout.result(episode)
            result = attempt.to_json(as_result=True)
            created = self.store.put_new(result_key, json.dumps(result, sort_keys=True).encode())
            if not created and not self._same(result_key, result):
                item.outcome = "result_existed"
                self.log(f"result for {episode} already exists (another writer); kept the first one")
            else:
                item.result_written = True

    def _respool(self, item: Item) -> None:
        """Keep the spool file in step with a renumbered attempt (so a restart keeps the number)."""
        if not item.spool_path:
            return
        try:
            write_durably(item.spool_path, spool_doc(item))
        except OSError as exc:
            self.log(f"cannot rewrite spool file {item.spool_path}: {exc}")
