"""Spool-first uploads: every record object is written to a local spool file, then to the store.

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
- Store errors: the item goes back to the queue and all workers back off together (0.2 s doubling
  to 5 s) until the store answers again. Nothing is ever deleted from the store.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.record import Attempt, RecordError, RunLayout, parse_time
from spoteval.store import Store, StoreError

EVENT: Final = "event"
ATTEMPT: Final = "attempt"
PRIORITY_EVENT: Final = 0
PRIORITY_ATTEMPT: Final = 1
MAX_BACKOFF_S: Final = 5.0


@dataclass
class Item:
    """One thing to make durable. `payload` is the JSON object as the record has it."""

    kind: str  # EVENT or ATTEMPT
    payload: dict[str, Any]
    key_time: str = ""  # events: RFC 3339 time of the key
    node: str = ""  # events: node of the key
    seq: int = 0  # events: seq of the key
    write_result: bool = False  # attempts: also write results/{episode}.json
    spool_path: str = ""
    submitted: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    outcome: str = ""  # "created", "existed", "result_existed" once done
    attempt_number: int = 0  # attempts: the number it was stored under


Callback = Callable[[Item], None]


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
    ) -> None:
        self.store, self.layout, self.spool_dir = store, layout, spool_dir
        self.on_done = on_done
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
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, name=f"upload-{i}", daemon=True) for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # --- submitting ---------------------------------------------------------------------------

    def submit(self, item: Item) -> Item:
        """Spool the item (durable on local disk when this returns), then queue its upload."""
        if not item.spool_path:
            name = f"{time.time_ns():020d}-{os.getpid()}-{next(self._names):08d}-{item.kind}.json"
            item.spool_path = os.path.join(self.spool_dir, name)
            tmp = item.spool_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(_spool_doc(item), f, sort_keys=True, separators=(",", ":"))
            os.replace(tmp, item.spool_path)
        with self._lock:
            self._outstanding += 1
        priority = PRIORITY_EVENT if item.kind == EVENT else PRIORITY_ATTEMPT
        self._queue.put((priority, next(self._order), item))
        return item

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
                item = _item_from_doc(doc)
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
    def store_down(self) -> bool:
        with self._lock:
            return self._down_until > time.monotonic()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted item is in the store; False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left if left is not None else 1.0)
        return True

    def close(self) -> None:
        self._stopping = True

    # --- the workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                wait = self._down_until - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.5))
                continue
            try:
                priority, order, item = self._queue.get(timeout=0.5)
            except queue.Empty:
                if self._stopping:
                    return
                continue
            try:
                self._upload(item)
            except StoreError as exc:
                with self._lock:
                    self.failures += 1
                    self.last_error = str(exc)
                    if self._down_until <= time.monotonic():
                        self._backoff = min(MAX_BACKOFF_S, max(0.2, self._backoff * 2))
                        self._down_until = time.monotonic() + self._backoff
                        self.log(f"store did not answer ({exc}); retrying in {self._backoff:.1f} s")
                self._queue.put((priority, order, item))
                continue
            except Exception as exc:  # a malformed item (or a bug): keep its spool file, keep the thread
                self.log(f"cannot upload spooled item {item.spool_path}: {exc!r}; left in the spool")
                item.outcome = "refused"
            else:
                with self._lock:
                    if self._backoff:
                        self.log("store answers again")
                    self._backoff = 0.0
                with contextlib.suppress(OSError):
                    os.unlink(item.spool_path)
            item.done.set()
            if self.on_done is not None:
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
        item.attempt_number = int(item.payload["attempt"])
        if item.write_result:
            attempt, problems = Attempt.from_json(item.payload, as_result=True)
            if problems:
                raise RecordError("; ".join(problems))
            result_key = self.layout.result(episode)
            result = attempt.to_json(as_result=True)
            created = self.store.put_new(result_key, json.dumps(result, sort_keys=True).encode())
            if not created and not self._same(result_key, result):
                item.outcome = "result_existed"
                self.log(f"result for {episode} already exists (another writer); kept the first one")

    def _respool(self, item: Item) -> None:
        """Keep the spool file in step with a renumbered attempt (so a restart keeps the number)."""
        tmp = item.spool_path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(_spool_doc(item), f, sort_keys=True, separators=(",", ":"))
            os.replace(tmp, item.spool_path)
        except OSError as exc:
            self.log(f"cannot rewrite spool file {item.spool_path}: {exc}")


def _spool_doc(item: Item) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "payload": item.payload,
        "key_time": item.key_time,
        "node": item.node,
        "seq": item.seq,
        "write_result": item.write_result,
    }


def _item_from_doc(doc: Any) -> Item:
    if not isinstance(doc, dict) or doc.get("kind") not in (EVENT, ATTEMPT):
        raise ValueError("not a spool document")
    payload = doc["payload"]
    if not isinstance(payload, dict):
        raise ValueError("spool payload is not an object")
    return Item(
        kind=str(doc["kind"]),
        payload=payload,
        key_time=str(doc.get("key_time", "")),
        node=str(doc.get("node", "")),
        seq=int(doc.get("seq", 0)),
        write_result=bool(doc.get("write_result", False)),
    )
