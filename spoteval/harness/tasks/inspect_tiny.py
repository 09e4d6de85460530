"""A ten-question inspect-ai task over a local JSONL file (see spoteval/harness/tasks/__init__.py)."""

from __future__ import annotations

import os

from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import exact
from inspect_ai.solver import generate

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inspect_tiny.jsonl")


@task
def spoteval_tiny(max_tokens: int = 4) -> Task:
    return Task(
        dataset=json_dataset(DATA, FieldSpec(input="input", target="target", id="id")),
        solver=generate(),
        scorer=exact(),
        config=GenerateConfig(max_tokens=max_tokens),
    )
