"""Twelve sums (arith12.jsonl beside this file); the system message is read from system.txt while the
task runs, by a relative path, as a user's own task would."""

import os

from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.model import ChatMessageSystem
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver

HELPERS = os.environ.get("ARITH_HELPERS") == "1"


@solver
def system_from_file() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        with open("system.txt") as f:  # relative: the task's own folder is the working folder
            text = f.read().strip()
        if HELPERS:
            import arith_helpers  # from the eval's requirements

            text = arith_helpers.polite(text)
        state.messages.insert(0, ChatMessageSystem(content=text))
        return state

    return solve


@task
def arith12() -> Task:
    return Task(
        dataset=json_dataset("arith12.jsonl", FieldSpec(input="input", target="target", id="id")),
        solver=[system_from_file(), generate()],
        scorer=includes(),
    )
