"""A user's own eval, as the user names it, made into what ships and what the node runs.

The same for a stack's `eval:` block and the drill's options (`--task`, `--workdir`,
`--requirements`, ...): `resolve(UserEval, base)` checks the names against this machine's files and
says what ships (a `ProjectSpec` for spoteval/bundle/), how the node names the task (inside the
bundle's `eval/`), and the agent's `eval_env` (spoteval/agent/evalenv.py); `check_in_bundle` then
checks the task against the bundle as built (a file excluded by `.gitignore` does not ship, so it
is refused here, not on a paid node); `list_in_bundle` lists the task's samples with the harness,
run from a copy of that bundle, as the node would.

Every refusal is an `EvalError` naming what the user gave (`task`, `workdir`, `requirements`,
`exclude`, `ship_credentials`, `samples`): the stack reports it as `eval.FIELD`, the drill as
`--FIELD`, each in one line.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoteval.bundle import EVAL_DIR
from spoteval.bundle.build import Bundle
from spoteval.bundle.project import ProjectSpec
from spoteval.bundle.unpack import UnpackError, unpack
from spoteval.harness.ids import SampleId, SampleIdError, parse_samples
from spoteval.harness.taskref import FILE, FOLDER, MODULE, TaskError, TaskRef, local_path, on_node, split


class EvalError(Exception):
    """A user's eval that cannot run as named; `field` is the key or option it came from."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class UserEval:
    """What the user names: a harness task, or a command with its folder; and what it needs."""

    harness: str | None = None  # inspect | lm-eval | None (an episode command)
    task: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    workdir: str | None = None
    requirements: str | tuple[str, ...] | None = None  # a requirements file, or the lines
    excludes: tuple[str, ...] = ()
    ship_credentials: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvedEval:
    project: ProjectSpec | None  # what ships under eval/ (None: nothing of the user's)
    ref: TaskRef | None
    node_task: str | None  # the task as the node's shard runner gets it
    node_options: Mapping[str, Any]  # the harness options as the node gets them
    eval_env: dict[str, Any] | None  # the agent's eval_env without venvs_dir (None: no section)

    def agent_eval_env(self, venvs_dir: str) -> dict[str, Any] | None:
        return None if self.eval_env is None else {**self.eval_env, "venvs_dir": venvs_dir}


def _folder(written: str, base: Path, what: str) -> Path:
    try:
        path = local_path(written, base)
    except TaskError as exc:
        raise EvalError(what, str(exc)) from None
    if not path.is_dir():
        raise EvalError(what, f"{written} is not a folder")
    return path


def _requirements(
    user: UserEval, base: Path, project: Path | None
) -> tuple[str | None, tuple[str, ...] | None]:
    """(the requirements file relative to the project, or the lines)."""
    req = user.requirements
    if req is None:
        return None, None
    if isinstance(req, tuple):
        if not req or not all(isinstance(r, str) and r.strip() for r in req):
            raise EvalError("requirements", "give requirement strings, e.g. inspect-ai==0.3.285")
        return None, req
    try:
        path = local_path(req, base)
    except TaskError as exc:
        raise EvalError("requirements", str(exc)) from None
    if not path.is_file():
        raise EvalError("requirements", f"requirements file {req} does not exist")
    if project is None:
        raise EvalError(
            "requirements",
            f"{req} ships with the eval project: name the folder that holds it (workdir), or list the "
            "requirements instead",
        )
    try:
        return path.relative_to(project).as_posix(), None
    except ValueError:
        raise EvalError(
            "requirements",
            f"{req} is outside the eval project {project}: put it there, or name a workdir that holds both",
        ) from None


def resolve(user: UserEval, base: Path) -> ResolvedEval:
    """Check the user's names against this machine's files (EvalError); nothing is written."""
    ref: TaskRef | None = None
    task_dir: Path | None = None
    if user.harness is not None:
        if user.task is None:
            raise EvalError("task", "name the task")
        try:
            ref = split(user.harness, user.task, user.options)
            if ref.path is not None:
                local = local_path(ref.path, base)
                if ref.kind == FILE and not local.is_file():
                    raise TaskError(f"task file {ref.path} does not exist")
                if ref.kind == FOLDER and not local.is_dir():
                    raise TaskError(f"lm-eval task folder {ref.path} does not exist")
                task_dir = local.parent if ref.kind == FILE else local
        except TaskError as exc:
            raise EvalError("task", str(exc)) from None
    project = _folder(user.workdir, base, "workdir") if user.workdir is not None else task_dir
    if ref is not None and project is not None and task_dir is not None and not _inside(task_dir, project):
        raise EvalError("task", f"{user.task} is not inside the workdir {project}")
    req_file, req_lines = _requirements(user, base, project)
    spec = None
    if project is not None:
        spec = ProjectSpec(
            root=project,
            excludes=user.excludes,
            ship_credentials=user.ship_credentials,
            requirements_file=req_file,
            requirements=req_lines,
        )
    elif user.excludes or user.ship_credentials:
        what = "exclude" if user.excludes else "ship_credentials"
        raise EvalError(what, "applies to the eval project: name a task file or folder, or a workdir")
    node_task = None
    options = dict(user.options)
    if ref is not None:
        node_task = on_node(ref, base, project, EVAL_DIR)
        if ref.kind == FOLDER:
            options.pop("include_path", None)  # named in the task, FOLDER@TASK
    env: dict[str, Any] | None = None
    if spec is not None or req_lines is not None:
        env = {}
        if spec is not None:
            env["workdir"] = EVAL_DIR
        if req_file is not None:
            env["requirements_file"] = f"{EVAL_DIR}/{req_file}"
        if req_lines is not None:
            env["requirements"] = list(req_lines)
    return ResolvedEval(spec, ref, node_task, options, env)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def _defines(source: str, name: str) -> bool:
    tree = ast.parse(source)
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in tree.body)


def check_in_bundle(resolved: ResolvedEval, bundle: Bundle) -> bool:
    """The task as it ships (EvalError when it does not); False when only the harness can tell."""
    ref, task = resolved.ref, resolved.node_task
    if ref is None or task is None:
        return False
    files = set(bundle.files)
    where = task.rpartition("@")[0] if "@" in task else task
    if ref.kind == FILE:
        if where not in files:
            raise EvalError("task", f"{ref.path} does not ship: .gitignore or an exclude keeps it home")
        if ref.name and not _defines(bundle.read(where).decode("utf-8"), ref.name):
            raise EvalError("task", f"{ref.path} defines no task function {ref.name!r}")
        return True
    if ref.kind == FOLDER:
        pattern = re.compile(rf"^task:\s*['\"]?{re.escape(str(ref.name))}['\"]?\s*$", re.MULTILINE)
        prefix = where.rstrip("/") + "/"
        for name in sorted(n for n in files if n.startswith(prefix) and n.endswith((".yaml", ".yml"))):
            if pattern.search(bundle.read(name).decode("utf-8", errors="replace")):
                return True
        if resolved.node_options.get("include_defaults") is True:
            return False
        raise EvalError(
            "task", f"lm-eval task {ref.name!r} is not in {ref.path}: no YAML file there defines it"
        )
    if ref.kind == MODULE and ref.module is not None:
        rel = ref.module.replace(".", "/")
        for candidate in (f"{EVAL_DIR}/{rel}.py", f"{EVAL_DIR}/{rel}/__init__.py"):
            if candidate in files:
                if not _defines(bundle.read(candidate).decode("utf-8"), str(ref.name)):
                    raise EvalError("task", f"module {ref.module} defines no task function {ref.name!r}")
                return True
    return False


def list_in_bundle(
    bundle: Bundle,
    harness: str,
    task: str,
    args: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    python: str = sys.executable,
) -> list[SampleId]:
    """The task's sample ids, listed by the harness from a copy of the bundle (EvalError)."""
    with tempfile.TemporaryDirectory(prefix="spot-eval-list-") as tmp:
        archive = Path(tmp, "bundle.zip")
        archive.write_bytes(bundle.data)
        try:
            root = unpack(archive, Path(tmp, "bundle"))
        except UnpackError as exc:
            raise EvalError("task", str(exc)) from None
        argv = [python, "-m", "spoteval.harness", "list", "--harness", harness, "--task", task]
        argv += ["--args", json.dumps(dict(args)), "--options", json.dumps(dict(options))]
        cwd = root / EVAL_DIR if (root / EVAL_DIR).is_dir() else root
        env = {**os.environ, "PYTHONPATH": str(root), "SPOTEVAL_WORK_DIR": tmp}
        done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, check=False)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"exit {done.returncode}"
        raise EvalError("samples", f"listing the task's samples failed: {reason}")
    try:
        return parse_samples(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, SampleIdError) as exc:
        raise EvalError("samples", f"listing the task's samples gave no list: {exc}") from None
