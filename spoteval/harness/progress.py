"""A shard's progress in the run record's store: finished samples and the harness's logs.

Keys (relative to the store's root; every one written create-only, never overwritten):

    runs/{run_id}/harness/{episode_id}/samples/{sample_key}/{epoch}.json
        one finished sample (spoteval.harness.base.SampleRecord), written the moment the harness
        finishes it. A later attempt of the same shard, on any node, lists this prefix and runs only
        the samples that are not there: resume comes from the store, never from a node's disk.
    runs/{run_id}/harness/{episode_id}/logs/{attempt_token}/{file}
        the harness's own log files of one attempt (inspect's `.eval` log, lm-eval's results and
        samples JSON), uploaded when the attempt ends. `attempt_token` is
        `{UTC start time}-{node}`. Logs of an attempt killed with its process (SIGKILL, a notice)
        stay in the node's work folder and are uploaded by the next attempt of the shard on that
        node; those of a node that is lost are lost with its disk (its finished samples are not).

`sample_key` is the sample id made a key segment by spoteval.harness.ids.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime

from spoteval.harness.base import SampleRecord
from spoteval.record import RecordError, RunLayout, check_id, node_segment
from spoteval.store import Store


@dataclass(frozen=True)
class ShardKeys:
    run_id: str
    episode_id: str

    def __post_init__(self) -> None:
        check_id(self.episode_id, "episode id")

    @property
    def prefix(self) -> str:
        return f"{RunLayout(self.run_id).prefix}harness/{self.episode_id}/"

    @property
    def samples_prefix(self) -> str:
        return f"{self.prefix}samples/"

    def sample(self, key: str, epoch: int = 1) -> str:
        return f"{self.samples_prefix}{check_id(key, 'sample key')}/{int(epoch)}.json"

    def log(self, token: str, name: str) -> str:
        return f"{self.prefix}logs/{check_id(token, 'attempt token')}/{check_id(name, 'log file name')}"


def attempt_token(started: datetime, node: str) -> str:
    return f"{started.strftime('%Y%m%dT%H%M%S.%fZ')}-{node_segment(node)}"[:200]


class Progress:
    """Finished samples of one shard, read from and written to the store."""

    def __init__(self, store: Store, keys: ShardKeys) -> None:
        self.store = store
        self.keys = keys

    def finished(self) -> dict[str, list[SampleRecord]]:
        """sample key -> its records by epoch, for every sample an earlier attempt finished."""
        found: dict[str, dict[int, SampleRecord]] = {}
        prefix = self.keys.samples_prefix
        for name in self.store.list(prefix):
            parts = name[len(prefix) :].split("/")
            if len(parts) != 2 or not parts[1].endswith(".json") or not parts[1][:-5].isdigit():
                continue
            data = self.store.get(name)
            if data is None:
                continue
            try:
                record = json.loads(data)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.setdefault(parts[0], {})[int(parts[1][:-5])] = record
        return {key: [epochs[e] for e in sorted(epochs)] for key, epochs in found.items()}

    def record(self, record: SampleRecord) -> bool:
        """Write one finished sample (create-only): True if this call wrote it."""
        key = self.keys.sample(str(record["key"]), int(record.get("epoch", 1)))
        return self.store.put_new(key, json.dumps(record, sort_keys=True, default=str).encode())

    def upload_logs(self, token: str, folder: str) -> list[str]:
        """Every file under `folder` (flattened: `a/b.json` -> `a_b.json`) to the store; their keys."""
        keys: list[str] = []
        if not os.path.isdir(folder):
            return keys
        for root, _dirs, files in os.walk(folder):
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, folder).replace(os.sep, "_")
                try:
                    key = self.keys.log(token, _safe_name(rel))
                except RecordError:
                    continue
                with open(path, "rb") as f:
                    self.store.put_new(key, f.read())
                keys.append(key)
        return sorted(keys)

    def sweep(self, work_root: str, current: str) -> list[str]:
        """Upload, then remove, log folders that earlier attempts on this node left in `work_root`."""
        keys: list[str] = []
        if not os.path.isdir(work_root):
            return keys
        for token in sorted(os.listdir(work_root)):
            folder = os.path.join(work_root, token)
            if token == current or not os.path.isdir(folder):
                continue
            try:
                check_id(token, "attempt token")
            except RecordError:
                continue
            keys.extend(self.upload_logs(token, os.path.join(folder, "logs")))
            shutil.rmtree(folder, ignore_errors=True)
        return keys


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._=+@-") else "_" for c in name)
    cleaned = cleaned.replace("..", "._")
    return cleaned if cleaned[:1].isalnum() else f"f{cleaned}"
