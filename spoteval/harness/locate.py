"""Where a shard's task is on this machine, and the folder it runs in (as at home).

The runner hands the harness absolute paths: an inspect task file (`/.../eval/arith.py@arith`),
an lm-eval `include_path`; and it changes the working folder to the task's own folder (the file's
folder, or the lm-eval task folder) before the harness loads anything, so that a relative
`data_files` path in a YAML, a relative file the task opens, or a module beside the task file
work unchanged. A task named by module (`package.module@TASK`) runs where the episode was started
(the eval project's folder on the node), which is put first on the module search path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoteval.harness.base import HarnessError
from spoteval.harness.taskref import FILE, FOLDER, MODULE, TaskError, node_path, split


def bundle_root() -> str:
    """The folder that holds `spoteval/`: the unpacked bundle on a node, the checkout at home."""
    return str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class Located:
    task: str  # what the harness module gets as its task
    options: Mapping[str, Any]  # with lm-eval's include_path made absolute
    folder: str | None  # the working folder of the harness (None: stay)


def locate(harness: str, task: str, options: Mapping[str, Any]) -> Located:
    """The task on this machine (TaskError for a malformed task, HarnessError for a missing file)."""
    try:
        ref = split(harness, task, options)
    except TaskError as exc:
        raise HarnessError(f"task {task!r}: {exc}") from None
    root = bundle_root()
    if ref.kind == FILE:
        assert ref.path is not None
        path = node_path(ref.path, root)
        if not os.path.isfile(path):
            raise HarnessError(f"inspect task file {ref.path} does not exist here ({path})")
        return Located(ref.spelled(path), options, os.path.dirname(path))
    if ref.kind == FOLDER:
        assert ref.path is not None and ref.name is not None
        folder = node_path(ref.path, root)
        if not os.path.isdir(folder):
            raise HarnessError(f"lm-eval task folder {ref.path} does not exist here ({folder})")
        return Located(ref.name, {**options, "include_path": folder}, folder)
    if ref.kind == MODULE:
        here = os.getcwd()
        if here not in sys.path:
            sys.path.insert(0, here)
    return Located(task, options, None)


def enter(located: Located) -> None:
    """Work in the task's own folder from now on."""
    if located.folder is not None:
        os.chdir(located.folder)
