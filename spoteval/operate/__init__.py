"""The operator: after a preemption, the node starts again within the user's grant.

- `status`: what a node is doing (serving, preempted and waiting for capacity, stopped by a rule,
  done), from the run record and the provider's state; the report calls the same functions.
- `decide`: the pure decision for one node (`decide(view, grant, run) -> Action`).
- `journal`: what the operator reads from and writes to the run record.
- `loop`: the `Operator` that observes, decides, acts and records, node by node.
"""

from spoteval.node_status import LABELS, NodeStatus, node_status, record_node
from spoteval.operate.decide import Action, NodeView, Timing, decide
from spoteval.operate.journal import Journal, Note, RunView, read_run
from spoteval.operate.loop import Line, Operator, engine_restarts

__all__ = [
    "LABELS",
    "Action",
    "Journal",
    "Line",
    "NodeStatus",
    "NodeView",
    "Note",
    "Operator",
    "RunView",
    "Timing",
    "decide",
    "engine_restarts",
    "node_status",
    "read_run",
    "record_node",
]
