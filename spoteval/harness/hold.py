"""A rehearsal's exact preemption point: hold a shard once the run has N samples in the store.

The drill's `--preempt-after-samples N` takes a node once N samples are in the store. Watching the
store from outside is always a little late (a fast harness writes dozens of samples a second), so
the drill also sets `SPOTEVAL_HOLD_AFTER_SAMPLES=N` for that node's life: after the runner writes a
sample it counts the run's samples in the store, and once there are N it stops where it is (the
harness's sample hook does not return) until the node is taken. Each slot of the node writes at
most one sample after the N-th (the one it was writing), so a test can place a preemption inside a
shard exactly. Nothing sets the variable on a real node; without it nothing is counted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.harness.progress import ShardKeys
from spoteval.record import RunLayout
from spoteval.store import Store, StoreError

ENV: Final = "SPOTEVAL_HOLD_AFTER_SAMPLES"


@dataclass
class Hold:
    store: Store
    run_id: str
    after: int

    def samples_in_store(self) -> int:
        prefix = f"{RunLayout(self.run_id).prefix}harness/"
        try:
            return sum(1 for key in self.store.list(prefix) if "/samples/" in key)
        except StoreError:
            return 0

    def check(self) -> None:
        """After a sample was written: block for good once the run has `after` samples."""
        if self.samples_in_store() >= self.after:
            while True:  # the notice (SIGTERM) or the node's end stops it
                time.sleep(3600)


def hold_from(env: Mapping[str, str], store: Store, keys: ShardKeys) -> Hold | None:
    raw = env.get(ENV)
    if not raw or not raw.isdigit() or int(raw) < 1:
        return None
    return Hold(store, keys.run_id, int(raw))
