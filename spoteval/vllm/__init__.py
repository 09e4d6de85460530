"""The real model server on this machine's CPU: vLLM's CPU build, in an environment of its own.

- env.py: where the vLLM environment is (`make vllm` builds `venv-vllm/`), whether it is ready, the
  tiny model (built at first use and cached there), and the server command and environment the
  drill, the tests and the benchmark run;
- serve.py, tiny_model.py, requirements.py: scripts that run with that environment's Python
  (standalone: they import nothing of spot-eval), for the server, the model and the install.

The agent reads vLLM's start-up phases from its log (spoteval/agent/server_phases.py).
"""

from __future__ import annotations

from spoteval.vllm.env import (
    INSTALL_COMMAND,
    MODEL_NAME,
    VllmEnv,
    VllmMissing,
    find_env,
    server_command,
    server_environment,
)

__all__ = [
    "INSTALL_COMMAND",
    "MODEL_NAME",
    "VllmEnv",
    "VllmMissing",
    "find_env",
    "server_command",
    "server_environment",
]
