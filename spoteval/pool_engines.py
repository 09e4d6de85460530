"""How a pool is scaled to zero from one of its nodes, per provider: the engine's call and the one
permission the node needs on its own group. Each is a fact of its provider's module
(spoteval/providers/, `POOL_SCALE`, with its source and the date checked, beside the metadata paths
these calls read their credentials from); this is the view by key. Read by the agent
(spoteval/agent/scale_zero.py) and the stacks (components/pool_stop.py). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers import REGISTRY, PoolScale

__all__ = ["POOL_SCALE", "PoolScale"]

#: provider key -> how its pool is scaled to zero. Runpod and Nebius pools are N single nodes:
#: each stops itself through its provider's API (`stop_rules.on_done: api_stop`).
POOL_SCALE: Final[Mapping[str, PoolScale]] = {
    key: p.POOL_SCALE for key, p in REGISTRY.items() if isinstance(p.POOL_SCALE, PoolScale)
}
