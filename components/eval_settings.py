"""The stack's `eval:` block: a harness and its task, the user's eval project, and the shard manifest.

    eval:
      harness: inspect | lm-eval        # instead of `command` (exactly one of the two)
      task: evals/arith.py@arith        # inspect PATH.py@TASK | package.module@TASK; lm-eval FOLDER@TASK
      task_args: {...}                  # the task's arguments
      options: {...}                    # the harness's own options
      samples: [ids] | N                # the shards' samples: these ids, the first N, or (absent) all
      shard_size: 25                    # samples per episode; absent: chosen from measured timings
      startup_s: 12 / sample_s: 1.4     # your figures, refining the chosen size
      timing_from: {store: URL, run_id: ID}   # plan from an earlier run's record
      # with a harness or a command:
      workdir: evals                    # the eval project (default: the task's folder)
      requirements: evals/requirements.txt | [inspect-ai==0.3.285, ...]
      exclude: ["data/raw/"]            # .gitignore-style, beside the project's .gitignore files
      ship_credentials: [".env"]        # credential-looking files that must ship anyway

Paths are relative to the stack file's repository, or absolute (spoteval/harness/taskref.py).
`parse_harness(block)` and `parse_project(block)` are pure: they read those keys from the `eval`
reader (errors are the reader's, `SettingsError` naming `eval.KEY`). When the program builds its
context, before anything is declared (components/base.py), `resolve_eval` checks the names against
the files, the bundle is built with the project, and `check_task` checks the task against the bundle
as built (a file `.gitignore` keeps home is refused); a registry task (`inspect_evals/gsm8k`, lm-eval
with `include_defaults`) is checked when its samples are listed with the harness (from a copy of the
bundle, when `samples` is absent or a count), else by the first shard (a `harness_error`). The
shards are planned with `spoteval.harness.shards.plan` (as the drill does) and the manifest the node
registers is written. The episode command is `spoteval.harness.shards.episode_command` with the
node's name of the task and the server block's model (components/startup.py).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from spoteval.bundle.build import Bundle
from spoteval.bundle.project import ProjectError
from spoteval.config_reader import Reader
from spoteval.harness import PACKAGES
from spoteval.harness.ids import SampleId, SampleIdError, parse_samples
from spoteval.harness.shards import HarnessBlock, ShardPlan, plan
from spoteval.harness.shipping import (
    EvalError,
    ResolvedEval,
    UserEval,
    check_in_bundle,
    list_in_bundle,
    resolve,
)
from spoteval.harness.taskref import TaskError, split
from spoteval.harness.timing import Timing, timing_from_record
from spoteval.manifest import dump_manifest

#: the harnesses a stack can name (spoteval.harness.HARNESSES, without importing either harness)
HARNESS_NAMES: Final = ("inspect", "lm-eval")
HARNESS_KEYS: Final = frozenset(
    {
        "harness",
        "task",
        "task_args",
        "options",
        "samples",
        "shard_size",
        "sample_s",
        "startup_s",
        "timing_from",
    }
)
#: the user's eval project: read with a harness and with a command
PROJECT_KEYS: Final = frozenset({"workdir", "requirements", "exclude", "ship_credentials"})
#: every key of the `eval:` block
EVAL_KEYS: Final = (
    frozenset({"command", "manifest", "concurrency", "max_attempts", "timeout_s", "heartbeat_s"})
    | HARNESS_KEYS
    | PROJECT_KEYS
)
#: what the node installs into the agent's venv for each harness: (module to import, requirement)
NODE_PACKAGES: Final[Mapping[str, tuple[str, str]]] = PACKAGES


class SettingsErrorLike(Protocol):
    """The error a stack setting raises (components.settings.SettingsError): key and message."""

    def __call__(self, key: str, message: str) -> Exception: ...


@dataclass(frozen=True)
class HarnessEval:
    """What the `eval:` block names instead of a command."""

    name: str  # inspect | lm-eval
    task: str
    task_args: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    samples: tuple[SampleId, ...] | int | None = None  # ids, the first N, or every sample
    shard_size: int | None = None
    sample_s: float | None = None
    startup_s: float | None = None
    timing_from: tuple[str, str] | None = None  # (store URL, run id) of an earlier run's record

    def block(
        self,
        model: str,
        samples: tuple[SampleId, ...] | None = None,
        *,
        task: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> HarnessBlock:
        """The block as the node runs it (`task` and `options` as the node names them)."""
        return HarnessBlock(
            harness=self.name,
            task=self.task if task is None else task,
            model=model,
            args=dict(self.task_args),
            options=dict(self.options if options is None else options),
            samples=samples,
            episode_size=self.shard_size,
            sample_s=self.sample_s,
            startup_s=self.startup_s,
        )


@dataclass(frozen=True)
class EvalProject:
    """The user's eval project (`workdir`) and what it needs (`requirements`), with what ships."""

    workdir: str | None = None
    requirements: str | tuple[str, ...] | None = None  # a requirements file, or requirement lines
    exclude: tuple[str, ...] = ()
    ship_credentials: tuple[str, ...] = ()


def _mapping(block: Reader, key: str) -> dict[str, Any]:
    value = block.value(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        block.fail(key, f"must be a mapping, got {value!r}")
    return dict(value)


def _samples(block: Reader, name: str) -> tuple[SampleId, ...] | int | None:
    value = block.value("samples")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            block.fail("samples", f"must be >= 1 (the first N samples) or a list of ids, got {value}")
        return value
    if not isinstance(value, list) or not value:
        block.fail("samples", f"must be a non-empty list of sample ids or a count, got {value!r}")
    try:
        ids = parse_samples(value)
    except SampleIdError as exc:
        block.fail("samples", str(exc))
    if name == "lm-eval" and not all(isinstance(i, int) for i in ids):
        block.fail("samples", "lm-eval's sample ids are document indices (integers >= 0)")
    return tuple(ids)


def parse_harness(block: Reader) -> HarnessEval | None:
    """The harness named in the `eval` block, or None when it gives a `command` (exactly one)."""
    has_command, has_harness = block.has("command"), block.has("harness")
    if has_command and has_harness:
        block.fail("harness", "give either command or harness, not both")
    if not has_command and not has_harness:
        block.fail("command", "give either command (your episode command) or harness (inspect or lm-eval)")
    if not has_harness:
        extra = sorted(k for k in HARNESS_KEYS if block.has(k))
        if extra:
            block.fail(extra[0], "is read only with harness (the command runs as given)")
        return None
    name = block.string("harness")
    if name not in HARNESS_NAMES:
        block.fail("harness", f"unknown harness {name!r} (known: {', '.join(HARNESS_NAMES)})")
    if block.has("manifest"):
        block.fail("manifest", "is made from the harness's samples in shards; remove it")
    options = _mapping(block, "options")
    task = block.string("task")
    try:
        split(name, task, options)
    except TaskError as exc:
        block.fail("task", str(exc))
    if (
        name == "lm-eval"
        and "@" not in task
        and "include_path" not in options
        and options.get("include_defaults") is not True
    ):
        block.fail("task", "name the lm-eval task as FOLDER@TASK (the folder of its YAML files)")
    shard_size = block.integer("shard_size", 0, minimum=1) if block.has("shard_size") else None
    startup_s = block.opt_number("startup_s", positive=False) if block.has("startup_s") else None
    return HarnessEval(
        name=name,
        task=task,
        task_args=_mapping(block, "task_args"),
        options=options,
        samples=_samples(block, name),
        shard_size=shard_size,
        sample_s=block.opt_number("sample_s", positive=True),
        startup_s=startup_s,
        timing_from=_timing_from(block),
    )


def _timing_from(block: Reader) -> tuple[str, str] | None:
    raw = _mapping(block, "timing_from")
    if not raw:
        return None
    store, run_id = raw.get("store"), raw.get("run_id")
    if not isinstance(store, str) or not isinstance(run_id, str) or set(raw) != {"store", "run_id"}:
        block.fail("timing_from", "give {store: URL, run_id: ID}, the record of an earlier run")
    return store, run_id


def _strings(block: Reader, key: str) -> tuple[str, ...]:
    value = block.value(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        block.fail(key, f"must be a list of strings, got {value!r}")
    return tuple(value)


def parse_project(block: Reader) -> EvalProject:
    """The eval project keys (with a harness or a command)."""
    requirements: str | tuple[str, ...] | None = None
    raw = block.value("requirements")
    if isinstance(raw, str):
        requirements = raw
    elif raw is not None:
        requirements = _strings(block, "requirements")
        if not requirements:
            block.fail("requirements", "give a requirements file or a non-empty list")
    return EvalProject(
        workdir=block.opt_string("workdir"),
        requirements=requirements,
        exclude=_strings(block, "exclude"),
        ship_credentials=_strings(block, "ship_credentials"),
    )


# --- at build time: the eval project, the task in the bundle, its samples, the shards ---------------


def user_eval(h: HarnessEval | None, project: EvalProject) -> UserEval:
    return UserEval(
        harness=None if h is None else h.name,
        task=None if h is None else h.task,
        options={} if h is None else dict(h.options),
        workdir=project.workdir,
        requirements=project.requirements,
        excludes=project.exclude,
        ship_credentials=project.ship_credentials,
    )


def resolve_eval(
    h: HarnessEval | None, project: EvalProject, base: Path, error: SettingsErrorLike
) -> ResolvedEval:
    """What ships and how the node names the task (SettingsError naming eval.FIELD)."""
    try:
        return resolve(user_eval(h, project), base)
    except (EvalError, ProjectError) as exc:
        raise error(f"eval.{exc.field}", str(exc)) from None


def check_task(resolved: ResolvedEval, bundle: Bundle, error: SettingsErrorLike) -> bool:
    """Refuse a task the bundle as built does not hold; False when only the harness can tell."""
    try:
        return check_in_bundle(resolved, bundle)
    except EvalError as exc:
        raise error(f"eval.{exc.field}", str(exc)) from None


def task_samples(
    h: HarnessEval, resolved: ResolvedEval, bundle: Bundle, error: SettingsErrorLike
) -> tuple[SampleId, ...]:
    """The shards' samples: as listed, else from the harness run from a copy of the bundle as built
    (lm-eval's first N need no listing)."""
    if isinstance(h.samples, tuple):
        return h.samples
    if not listed_by_harness(h):
        assert isinstance(h.samples, int)
        return tuple(range(h.samples))
    module, requirement = NODE_PACKAGES[h.name]
    try:
        __import__(module)
    except ImportError:
        raise error(
            "eval.samples",
            f"list the sample ids, or install {requirement} here so the stack can read them from the task",
        ) from None
    assert resolved.node_task is not None
    try:
        ids = list_in_bundle(bundle, h.name, resolved.node_task, h.task_args, resolved.node_options)
    except EvalError as exc:
        raise error("eval.task", str(exc)) from None
    if isinstance(h.samples, int):
        if h.samples > len(ids):
            raise error("eval.samples", f"{h.samples} is more than the task's {len(ids)} samples")
        ids = ids[: h.samples]
    return tuple(ids)


def _timing(h: HarnessEval, error: SettingsErrorLike) -> Timing | None:
    if h.timing_from is None:
        return None
    from spoteval.store import Store, StoreError

    url, run_id = h.timing_from
    try:
        timing = timing_from_record(Store(url), run_id, h.name)
    except StoreError as exc:
        raise error("eval.timing_from", f"cannot read run {run_id} in {url}: {exc}") from None
    if timing is None:
        raise error("eval.timing_from", f"run {run_id} in {url} has no completed {h.name} shard")
    return timing


def shard_plan(
    h: HarnessEval,
    model: str,
    concurrency: int,
    error: SettingsErrorLike,
    *,
    resolved: ResolvedEval,
    bundle: Bundle,
) -> ShardPlan:
    """The shards of the block's samples, of the given size or one chosen from the measured timings."""
    samples = task_samples(h, resolved, bundle, error)
    block = h.block(model, samples, task=resolved.node_task, options=resolved.node_options)
    try:
        return plan(block, samples, parallel=concurrency, timing=_timing(h, error))
    except (ValueError, SampleIdError) as exc:
        raise error("eval.samples", str(exc)) from None


def listed_by_harness(h: HarnessEval) -> bool:
    """The samples are read from the task with the harness (which checks the task on the way)."""
    return h.samples is None or (isinstance(h.samples, int) and h.name != "lm-eval")


def statement(h: HarnessEval, shards: ShardPlan, checked: bool) -> str:
    """One line stating the shards and their size, for `pulumi up` (and the tests)."""
    unchecked = not checked and not listed_by_harness(h)
    return (
        f"eval: {h.name} task {h.task}: {shards.describe()}; harness logs under "
        "runs/{run_id}/harness/{shard}/logs/ in the bucket"
        + ("; the task itself is checked on the node, by the first shard" if unchecked else "")
    )


def write_manifest(shards: ShardPlan, directory: Path | None = None) -> Path:
    """The shard manifest as a file named by its content (for a `pulumi.FileAsset`)."""
    data = dump_manifest(shards.entries)
    directory = directory or Path(tempfile.gettempdir()) / "spot-eval-bundle"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"manifest-{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def stages_manifest(h: HarnessEval | None, manifest: str | None) -> bool:
    """The node registers a manifest: the stack's file, or the harness's shards."""
    return bool(manifest) or h is not None
