"""A task, named one way for both harnesses, in a stack's `eval.task` and in the drill's `--task`:

    inspect   PATH.py@TASK          a task function in a file (`PATH.py` alone: the file's only task)
              package.module@TASK   a task function in an importable module
              NAME                  anything else inspect takes (a registry name: `inspect_evals/gsm8k`)
    lm-eval   FOLDER@TASK           a task defined by a YAML file in FOLDER (what `--include_path` takes)
              TASK                  with the option `include_path` (the older form), or lm-eval's own
                                    tasks with `include_defaults: true`

Where the user names it (`parse`), a relative PATH or FOLDER is relative to the stack file's
repository (the drill: the folder it runs in), or absolute; `..` must not leave that folder. The
task's folder (the file's, or FOLDER itself) is the eval project that ships to the node (unless
`eval.workdir` names a folder that holds it), and on the node the task is named inside the
unpacked bundle (`on_node`): `eval/arith.py@arith`, `eval/tasks@arith10`.

On the node the shard runner takes the same syntax (`node_task`): a relative path is looked up from
the working folder, then from the bundle's root (the folder that holds `spoteval/`); the task runs
with its own folder as the working directory, so relative paths inside it work as they do at home.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

FILE: Final = "file"  # inspect PATH.py[@TASK]
MODULE: Final = "module"  # inspect package.module@TASK
FOLDER: Final = "folder"  # lm-eval FOLDER@TASK (or TASK with include_path)
REGISTRY: Final = "registry"  # a name only the harness can resolve

_DOTTED: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")


class TaskError(Exception):
    """A task named in a way that cannot work (one line)."""


@dataclass(frozen=True)
class TaskRef:
    harness: str
    kind: str  # FILE | MODULE | FOLDER | REGISTRY
    path: str | None  # the file or folder, as written (FILE, FOLDER)
    name: str | None  # the task in it (None: inspect's only task in the file)
    module: str | None = None  # MODULE

    def spelled(self, path: str | None = None) -> str:
        """The task in the one syntax, with `path` in place of the written one."""
        where = self.path if path is None else path
        if self.kind == MODULE:
            return f"{self.module}@{self.name}"
        if self.kind == REGISTRY:
            return str(self.name)
        return f"{where}@{self.name}" if self.name else str(where)


def split(harness: str, task: str, options: Mapping[str, Any] | None = None) -> TaskRef:
    """The parts of a task as written (no file is read). `options` may carry lm-eval's older
    `include_path`; both it and `FOLDER@TASK` at once are refused."""
    options = options or {}
    text = task.strip()
    if not text:
        raise TaskError("the task is empty")
    where, at, name = text.rpartition("@")
    if harness == "lm-eval":
        include = options.get("include_path")
        if at:
            if include is not None:
                raise TaskError(f"{task}: give the folder once, as FOLDER@TASK or as include_path, not both")
            if not where or not name:
                raise TaskError(f"{task}: write FOLDER@TASK")
            return TaskRef(harness, FOLDER, where, name)
        if include is not None:
            if not isinstance(include, str) or not include:
                raise TaskError(f"include_path {include!r} must be a folder")
            return TaskRef(harness, FOLDER, include, text)
        return TaskRef(harness, REGISTRY, None, text)
    if harness != "inspect":
        raise TaskError(f"unknown harness {harness!r}")
    if at and not where:
        raise TaskError(f"{task}: write PATH.py@TASK or package.module@TASK")
    file = where if at else text
    if file.endswith(".py"):
        if at and not _NAME.match(name):
            raise TaskError(f"{task}: {name!r} is not a task function's name")
        return TaskRef(harness, FILE, file, name if at else None)
    if at:
        if "/" in file or not _DOTTED.match(file):
            raise TaskError(f"{task}: write PATH.py@TASK (a file) or package.module@TASK (a module)")
        return TaskRef(harness, MODULE, None, name, module=file)
    return TaskRef(harness, REGISTRY, None, text)


def local_path(written: str, base: Path) -> Path:
    """A path the user wrote, made absolute against `base` (refused when `..` leaves it)."""
    path = Path(written)
    if path.is_absolute():
        return Path(os.path.normpath(path))
    resolved = Path(os.path.normpath(base / path))
    if ".." in PurePosixPath(path.as_posix()).parts and not _within(resolved, base):
        raise TaskError(f"{written} leaves {base}: give a path inside it, or an absolute path")
    return resolved


def _within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(Path(os.path.normpath(folder)))
    except ValueError:
        return False
    return True


def task_folder(ref: TaskRef, base: Path) -> Path | None:
    """The folder the task lives in, on this machine (the default eval project); None for names."""
    if ref.path is None:
        return None
    path = local_path(ref.path, base)
    return path.parent if ref.kind == FILE else path


def on_node(ref: TaskRef, base: Path, project: Path | None, eval_dir: str) -> str:
    """The task as the node's command names it: inside the bundle's `eval_dir` when it ships there."""
    if ref.path is None or project is None:
        return ref.spelled()
    local = local_path(ref.path, base)
    if not _within(local, project):
        raise TaskError(f"{ref.path} is not inside the eval project {project}")
    rel = local.relative_to(project).as_posix()
    return ref.spelled(eval_dir if rel == "." else f"{eval_dir}/{rel}")


def node_path(written: str, bundle_root: str) -> str:
    """A relative path on the node: from the working folder if it is there, else from the bundle root."""
    if os.path.isabs(written) or os.path.exists(written):
        return os.path.abspath(written)
    return os.path.join(bundle_root, written)
