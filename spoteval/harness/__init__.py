"""The user's own eval harness on spot capacity: inspect-ai and lm-evaluation-harness.

    HARNESSES["inspect"]   spoteval/harness/inspect_harness.py
    HARNESSES["lm-eval"]   spoteval/harness/lm_eval_harness.py

The user names the harness, the task, its arguments and options; spot-eval splits the task's samples
into shards (spoteval/harness/shards.py), one episode each, and every episode runs
`python -m spoteval.harness run ...` (spoteval/harness/runner.py) on the node: it points the
harness at the model server, streams each finished sample to the run record's store
(spoteval/harness/progress.py), resumes from there, and decides the outcome from the harness's own
log. Importing this package does not import either harness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spoteval.harness.base import Harness, HarnessError
from spoteval.harness.inspect_harness import InspectHarness
from spoteval.harness.lm_eval_harness import LmEvalHarness

HARNESSES: Final[Mapping[str, Harness]] = {"inspect": InspectHarness(), "lm-eval": LmEvalHarness()}


def get(name: str) -> Harness:
    """The harness of that name; HarnessError (one line naming the known ones) otherwise."""
    harness = HARNESSES.get(name)
    if harness is None:
        raise HarnessError(f"unknown harness {name!r} (known: {', '.join(sorted(HARNESSES))})")
    return harness


__all__ = ["HARNESSES", "Harness", "HarnessError", "get"]
