"""A rehearsal's exact preemption point: hold a shard once the run has N samples in the store.

The drill's `--preempt-after-samples N` takes a node once N samples are in the store. Watching the
store from outside is always a little late (a fast harness writes dozens of samples a second), so
the drill also sets `SPOTEVAL_HOLD_AFTER_SAMPLES=N` for that node's life: after the runner writes a
sample it counts the run's samples in the store, and once there are N it stops where it is (the
harness's sample hook does not return) until the node is taken. Each slot of the node writes at
most one sample after the N-th (the one it was writing), so a test can place a preemption inside a
shard exactly. In a pool every node's first life holds, and the drill takes the node that runs a
shard then; it releases the others (`SPOTEVAL_HOLD_RELEASE`, a file it creates), which then go on.
Nothing sets the variables on a real node; without them nothing is counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.harness.progress import ShardKeys
from spoteval.record import RunLayout
from spoteval.store import Store, StoreError

ENV: Final = "SPOTEVAL_HOLD_AFTER_SAMPLES"
RELEASE_ENV: Final = "SPOTEVAL_HOLD_RELEASE"


@dataclass
class Hold:
    store: Store
    run_id: str
    after: int
    release: str | None = None  # a file whose existence ends the hold

    def samples_in_store(self) -> int:
        prefix = f"{RunLayout(self.run_id).prefix}harness/"
        try:
            return sum(1 for key in self.store.list(prefix) if "/samples/" in key)
        except StoreError:
            return 0

    def released(self) -> bool:
        return self.release is not None and os.path.exists(self.release)

    def check(self) -> None:
        """After a sample was written: once the run has `after` samples, block until the node is taken
        (the notice's SIGTERM, or its end), or until the drill releases this node."""
        if self.released() or self.samples_in_store() < self.after:
            return
        while not self.released():
            time.sleep(0.2)


def hold_from(env: Mapping[str, str], store: Store, keys: ShardKeys) -> Hold | None:
    raw = env.get(ENV)
    if not raw or not raw.isdigit() or int(raw) < 1:
        return None
    return Hold(store, keys.run_id, int(raw), env.get(RELEASE_ENV) or None)
