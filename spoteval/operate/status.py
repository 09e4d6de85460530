"""What `scripts.operate status` prints: each node's status (`spoteval.node_status`), the operator
lease's standing and what the deadline rule says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from spoteval.node_status import NodeStatus
from spoteval.operate.lease import Standing


def status_text(
    run_id: str,
    statuses: Sequence[NodeStatus],
    standing: Standing,
    *,
    as_json: bool = False,
    deadline: tuple[dict[str, Any] | None, Sequence[str]] = (None, ()),
) -> str:
    """What `scripts.operate status` prints: one line per node, the operator lease's standing and
    what the deadline rule says (`deadline`: its JSON and its lines), or the same as one JSON object."""
    found, said = deadline
    if as_json:
        doc = {
            "run_id": run_id,
            "nodes": [s.to_json() for s in statuses],
            "operator": standing.to_json(),
            "deadline": found,
        }
        return json.dumps(doc, indent=2)
    lines = []
    for s in statuses:
        state = f"{s.state.status} ({s.state.raw})" if s.state else "unknown"
        lines.append(f"{s.node}: {s.label}; provider: {state}; {s.detail}")
    lines.append(f"operator: {standing.summary()}")
    return "\n".join([*lines, *said])
