"""The stack's `eval:` block when it names a harness: parse, task check, and the shard manifest.

    eval:
      harness: inspect | lm-eval        # instead of `command` (exactly one of the two)
      task: spoteval/harness/tasks/inspect_tiny.py@spoteval_tiny
      task_args: {...}                  # the task's arguments
      options: {...}                    # the harness's own options (lm-eval: include_path, ...)
      samples: [ids] | N                # the shards' samples: these ids, the first N, or (absent) all
      shard_size: 25                    # samples per episode; absent: chosen from measured timings
      sample_s: 1.4                     # your model's time per sample, refining the chosen size

`parse_harness(block)` is pure: it reads those keys from the `eval` reader (errors are the
reader's, `SettingsError` naming `eval.KEY`). `harness_manifest(settings)` runs when the program
builds its context, before anything is declared: it checks that the task exists where that can be
told from the project's files (a task file under `spoteval/` and the `@name` it defines; an lm-eval
task in its `include_path`); a registry task (`inspect_evals/gsm8k`, or lm-eval with
`include_defaults`) is checked when its samples are listed with the harness (when `samples` is
absent or a count), else by the first shard (a `harness_error`). It then plans the shards with
`spoteval.harness.shards.plan` (as `python -m scripts.drill --harness` does) and writes the
manifest the node registers. The episode command is `spoteval.harness.shards.episode_command`
with the server block's model (components/startup.py).
"""

from __future__ import annotations

import ast
import hashlib
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from spoteval.config_reader import Reader
from spoteval.harness.ids import SampleId, SampleIdError, parse_samples
from spoteval.harness.shards import HarnessBlock, ShardPlan, plan
from spoteval.manifest import dump_manifest

#: the harnesses a stack can name (spoteval.harness.HARNESSES, without importing either harness)
HARNESS_NAMES: Final = ("inspect", "lm-eval")
HARNESS_KEYS: Final = frozenset(
    {"harness", "task", "task_args", "options", "samples", "shard_size", "sample_s"}
)
#: what the node installs into the agent's venv for each harness: (module to import, requirement)
NODE_PACKAGES: Final[Mapping[str, tuple[str, str]]] = {
    "inspect": ("inspect_ai", "inspect-ai>=0.3.285"),
    "lm-eval": ("lm_eval", "lm-eval[api]>=0.4.13"),
}
#: only files under this folder of the project ship to the node (components/bundle.py)
SHIPPED: Final = "spoteval"


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

    def block(self, model: str, samples: tuple[SampleId, ...] | None = None) -> HarnessBlock:
        return HarnessBlock(
            harness=self.name,
            task=self.task,
            model=model,
            args=dict(self.task_args),
            options=dict(self.options),
            samples=samples,
            episode_size=self.shard_size,
            sample_s=self.sample_s,
        )


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
    if name == "lm-eval" and "include_path" not in options and options.get("include_defaults") is not True:
        block.fail("options", "lm-eval needs include_path (a folder of task YAML files under spoteval/)")
    shard_size = block.integer("shard_size", 0, minimum=1) if block.has("shard_size") else None
    return HarnessEval(
        name=name,
        task=block.string("task"),
        task_args=_mapping(block, "task_args"),
        options=options,
        samples=_samples(block, name),
        shard_size=shard_size,
        sample_s=block.opt_number("sample_s", positive=True),
    )


# --- at build time: the task's files, its samples, the shards --------------------------------------


def _shipped_path(value: str, project_dir: Path) -> Path | None:
    """The project file a relative path names, when it ships to the node; None when it does not."""
    path = Path(value)
    if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != SHIPPED:
        return None
    return project_dir / path


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name for node in tree.body
    )


def check_task(h: HarnessEval, project_dir: Path, error: SettingsErrorLike) -> bool:
    """Refuse a task that does not exist in the project's files; False when files cannot tell."""
    if h.name == "inspect":
        file, _, func = h.task.partition("@")
        if not file.endswith(".py"):
            return False  # a registry name: only the harness can tell
        path = _shipped_path(file, project_dir)
        if path is None:
            raise error("eval.task", f"{file} must be a file under {SHIPPED}/ (only that ships to the node)")
        if not path.is_file():
            raise error("eval.task", f"task file {file} does not exist")
        if func and not _defines(path, func):
            raise error("eval.task", f"{file} defines no task function {func!r}")
        return True
    include = h.options.get("include_path")
    if include is None:
        return False  # lm-eval's bundled tasks (include_defaults): only the harness can tell
    folder = _shipped_path(include, project_dir) if isinstance(include, str) else None
    if folder is None or not folder.is_dir():
        raise error("eval.options.include_path", f"{include!r} must be a folder under {SHIPPED}/")
    pattern = re.compile(rf"^task:\s*['\"]?{re.escape(h.task)}['\"]?\s*$", re.MULTILINE)
    for yaml_file in sorted(folder.rglob("*.yaml")):
        if pattern.search(yaml_file.read_text(encoding="utf-8")):
            return True
    if h.options.get("include_defaults") is True:
        return False
    raise error("eval.task", f"lm-eval task {h.task!r} is not in {include}")


def task_samples(h: HarnessEval, error: SettingsErrorLike) -> tuple[SampleId, ...]:
    """The shards' samples: as listed, else from the harness (lm-eval's first N need no listing)."""
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
    from spoteval.harness import HarnessError, get

    try:
        ids = get(h.name).list_samples(h.task, dict(h.task_args), dict(h.options))
    except HarnessError as exc:
        raise error("eval.task", str(exc)) from None
    if isinstance(h.samples, int):
        if h.samples > len(ids):
            raise error("eval.samples", f"{h.samples} is more than the task's {len(ids)} samples")
        ids = ids[: h.samples]
    return tuple(ids)


def shard_plan(h: HarnessEval, model: str, concurrency: int, error: SettingsErrorLike) -> ShardPlan:
    """The shards of the block's samples, of the given size or one chosen from the measured timings."""
    samples = task_samples(h, error)
    try:
        return plan(h.block(model, samples), samples, parallel=concurrency)
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
