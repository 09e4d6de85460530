"""The facts behind the stacks' stop rules and the node's permissions, gathered from the providers'
fact modules (spoteval/providers/): the metric the AWS agent publishes for the idle alarm, the
condition keys and schedules the stacks rely on, the Nebius roles and the pool engines. Each fact
lives in its provider's module with its page and the date checked; these are views of them.
Standard library only: this module ships in the node's agent bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.providers import REGISTRY, AgentMetric, PoolEngine, Source, aws, nebius

__all__ = [
    "AWS_AGENT_METRIC",
    "NEBIUS_ROLES",
    "PERMISSION_FACTS",
    "POOL_ENGINES",
    "AgentMetric",
    "PoolEngine",
]

#: AWS: the agent's has-work metric, published with PutMetricData (Query API, GET, SigV4)
AWS_AGENT_METRIC: Final = aws.AGENT_METRIC

#: Facts behind the stop rules and permissions the stacks declare, each with its page
PERMISSION_FACTS: Final[Mapping[str, Source]] = {
    name: source for p in REGISTRY.values() for name, source in p.PERMISSIONS.items()
}

#: provider key -> its pool engine (spoteval/clouds/groups.py); providers without one are left out
POOL_ENGINES: Final[Mapping[str, PoolEngine]] = {
    key: p.POOLS for key, p in REGISTRY.items() if isinstance(p.POOLS, PoolEngine)
}

#: Nebius roles by use (spoteval/providers/nebius.py)
NEBIUS_ROLES: Final = nebius.ROLES
