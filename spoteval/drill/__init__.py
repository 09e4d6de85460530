"""The local drill: the whole operated run on one machine, with a chaos controller as the provider.

No cloud account: a store (a local folder, or S3 served by a moto server the drill starts), the
stand-in model server, the real node agent with provider `local`, and a controller that does what a
spot provider does to a node (controller.py). Modules:

- config.py: what a drill is asked (`DrillConfig`, the user's own eval `OwnEval`), what it did
  (`DrillResult`, `Kill`), the node's commands and agent config, the placement's starting workload;
- bundled.py: the agent bundle the drill's node runs, with the user's eval project, and the shards;
- controller.py: `Drill`, the chaos controller, and `run_drill`;
- node.py: the node's startup path (`python -m spoteval.drill node ...`);
- procs.py: the node's processes (list, freeze, kill, episodes in flight);
- display.py: the progress display;
- command.py: the drill command's run, report and output (scripts/drill.py parses the options).
"""

from __future__ import annotations

from spoteval.drill.command import report_of, run_command, summary
from spoteval.drill.config import (
    DRILL_POOL,
    NODE_ID,
    ON_DEMAND_PRICE,
    SAMPLE_FAIL_RATE,
    SAMPLE_SECONDS,
    SPOT_PRICE,
    DrillConfig,
    DrillError,
    DrillResult,
    Kill,
    OwnEval,
    agent_config,
    base_workload,
    sample_eval_command,
    standin_command,
)
from spoteval.drill.controller import Drill, run_drill
from spoteval.drill.display import Display
from spoteval.drill.node import node_main
from spoteval.drill.procs import Proc, descendants, episodes_in, frozen, identifiable, kill_node, processes

__all__ = [
    "DRILL_POOL",
    "NODE_ID",
    "ON_DEMAND_PRICE",
    "SAMPLE_FAIL_RATE",
    "SAMPLE_SECONDS",
    "SPOT_PRICE",
    "Display",
    "Drill",
    "DrillConfig",
    "DrillError",
    "DrillResult",
    "Kill",
    "OwnEval",
    "Proc",
    "agent_config",
    "base_workload",
    "descendants",
    "episodes_in",
    "frozen",
    "identifiable",
    "kill_node",
    "node_main",
    "processes",
    "report_of",
    "run_command",
    "run_drill",
    "sample_eval_command",
    "standin_command",
    "summary",
]
