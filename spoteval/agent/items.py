"""What the agent makes durable: one `Item` per record object (an event, or an ended attempt with
or without its final result), and its spool file.

A spool file is written atomically (a temporary file, then a rename), its data and its folder entry
fsynced (`write_durably`), so an item is on local disk once it is submitted
(spoteval/agent/uploader.py uploads it, then removes the file). `spool_doc` / `item_from_doc` are
the file's content: the item's kind, payload, event key, whether it carries a result, and the lease
holder an attempt of a pool node ran under.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

EVENT: Final = "event"
ATTEMPT: Final = "attempt"


@dataclass
class Item:
    """One thing to make durable. `payload` is the JSON object as the record has it."""

    kind: str  # EVENT or ATTEMPT
    payload: dict[str, Any]
    key_time: str = ""  # events: RFC 3339 time of the key
    node: str = ""  # events: node of the key
    seq: int = 0  # events: seq of the key
    write_result: bool = False  # attempts: also write results/{episode}.json
    holder: str = ""  # attempts of a pool node: the lease holder it ran under (see `Gate`)
    spool_path: str = ""
    submitted: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    #: once done: "created", "existed", "result_existed", "refused", "superseded", "given_up",
    #: "result_given_up"
    outcome: str = ""
    attempt_number: int = 0  # attempts: the number it was stored under
    attempt_written: bool = False  # attempts: the attempt object is in the store (the result may wait)
    result_written: bool = False  # attempts with write_result: the result stored is this one
    superseded: bool = False  # heartbeats: a newer one replaced it before it was uploaded
    order: int = 0  # submission order (set by `submit`)
    absorbed: list[Item] = field(default_factory=list)  # heartbeats it replaced (done with it)

    @property
    def is_heartbeat(self) -> bool:
        return self.kind == EVENT and self.payload.get("kind") == "heartbeat"

    @property
    def writer(self) -> tuple[str, str]:
        """(node, incarnation) of an event: a heartbeat replaces only its own writer's older ones."""
        details = self.payload.get("details")
        incarnation = details.get("incarnation") if isinstance(details, dict) else None
        return self.node, str(incarnation)


def write_durably(path: str, doc: dict[str, Any], *, sync: bool = True) -> None:
    """Write `doc` to `path` atomically (temporary file + rename), the data and the name fsynced
    unless `sync` is False (the caller fsyncs later, see `Uploader.sync`)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True, separators=(",", ":"))
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_folder(os.path.dirname(path) or ".")


def fsync_folder(path: str) -> None:
    folder = os.open(path, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def spool_doc(item: Item) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "payload": item.payload,
        "key_time": item.key_time,
        "node": item.node,
        "seq": item.seq,
        "write_result": item.write_result,
        "holder": item.holder,
    }


def item_from_doc(doc: Any) -> Item:
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
        holder=str(doc.get("holder") or ""),
    )
