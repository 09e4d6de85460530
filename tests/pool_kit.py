"""What the pool tests share (tests/test_agent_pool*.py): the pool section every node gets, a node's
config written with the run's manifest uploaded, and the pool's documents and attempts as read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from spoteval.agent.__main__ import main
from spoteval.record import Attempt
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import RunRecord, agent_config, write_config, write_manifest

#: claims of 6 episodes, renewed every half second, expired after 5 s
POOL: Final = {"batch": 6, "renew_s": 0.5, "expiry_s": 5.0}


def pool_node(target: StoreTarget, tmp_path: Path, run_id: str, node: str, ids: list[str], **kw: Any) -> str:
    """Node `node`'s agent config (in `tmp_path/node/`) and the run's manifest of `ids` uploaded;
    `kw` goes to the config (tests/fake_metadata.py: `agent_config`). Returns the config's path."""
    state = tmp_path / node
    state.mkdir()
    config = agent_config(target.url, target.options, run_id, state, node=node, pool=POOL, **kw)
    path = write_config(state / "agent.json", config)
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    return path


def documents(store: Store, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """Every JSON document under `prefix` (the pool's chunks, holders, leases), with its key."""
    return [(k, json.loads(store.get(k) or b"{}")) for k in store.list(prefix)]


def all_attempts(record: RunRecord) -> list[Attempt]:
    return [a for attempts in record.attempts.values() for a in attempts]


def completed(record: RunRecord) -> int:
    """How many attempts completed (one per episode when nothing ran twice)."""
    return sum(1 for a in all_attempts(record) if a.outcome == "completed")
