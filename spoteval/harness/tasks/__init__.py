"""Small tasks shipped with spot-eval, one per harness, for the drill and the tests (no hub download).

- `inspect_tiny.py@spoteval_tiny` (inspect-ai): ten questions from `inspect_tiny.jsonl`, ids with
  `/` and spaces, scored by `exact()`.
- `lm_eval@spoteval_tiny` (lm-eval, the folder `lm_eval/` with `tiny.yaml`): the same ten
  questions from `lm_eval/tiny.jsonl`, `generate_until`, scored by `exact_match`.

Against the stand-in model server (spoteval/standin.py) six of the ten are answered right in each
harness: their targets are the stand-in's deterministic answers to the prompt as each harness sends it.
"""

from __future__ import annotations

import json
import os
from typing import Final

from spoteval.harness.ids import SampleId
from spoteval.harness.shards import HarnessBlock

HERE: Final = os.path.dirname(os.path.abspath(__file__))
MODEL: Final = "standin"


def shipped(harness: str) -> tuple[HarnessBlock, list[SampleId]]:
    """The shipped task of a harness as a block (the task named by its absolute path on this
    machine, in the one task syntax of spoteval/harness/taskref.py) and its samples."""
    if harness == "inspect":
        with open(os.path.join(HERE, "inspect_tiny.jsonl")) as f:
            ids: list[SampleId] = [json.loads(line)["id"] for line in f if line.strip()]
        return HarnessBlock("inspect", f"{HERE}/inspect_tiny.py@spoteval_tiny", MODEL), ids
    if harness == "lm-eval":
        with open(os.path.join(HERE, "lm_eval", "tiny.jsonl")) as f:
            n = sum(1 for line in f if line.strip())
        return HarnessBlock("lm-eval", f"{HERE}/lm_eval@spoteval_tiny", MODEL), list(range(n))
    raise ValueError(f"no shipped task for harness {harness!r}")
