"""What the drill's node runs: the agent bundle as a stack builds it, with the user's eval project.

Before anything starts (a refusal is one line, exit 2), `prepare(cfg, base)`:

- resolves the user's eval as a stack's `eval:` block is resolved (spoteval/harness/shipping.py):
  `--task` (default: the harness's shipped task), `--workdir`, `--requirements`, `--exclude`,
  `--ship-credential`, paths relative to the folder the drill runs in (`base`) or absolute;
- builds the bundle (spoteval/bundle/build.py) with that project under `eval/`, checks the task
  against the bundle as built, and lists its samples with the harness run from a copy of that
  bundle when they are not given;
- plans the shards (spoteval/harness/shards.py) from the harness benchmark's timing, an earlier
  drill's record (`--timing-from`), or the user's figures, and states the plan;
- checks that the harness is there: in the drill's Python (which the drill's node runs, as a node
  runs its image's), or named in `--requirements` so that the node installs it.

Every node start then unpacks this very archive into a fresh folder and runs the agent from there
(spoteval/drill/node.py), with the requirements installed by the agent as on a real node.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spoteval.bundle.build import Bundle, build_bundle
from spoteval.bundle.project import ProjectError
from spoteval.drill.config import DrillConfig, DrillError, OwnEval, sample_eval_command
from spoteval.harness import PACKAGES, names_harness
from spoteval.harness.ids import SampleId
from spoteval.harness.shards import HarnessBlock, ShardPlan, episode_command, plan
from spoteval.harness.shipping import (
    EvalError,
    ResolvedEval,
    UserEval,
    check_in_bundle,
    list_in_bundle,
    resolve,
)
from spoteval.harness.timing import Timing, timing_from_record
from spoteval.manifest import ManifestEntry, parse_manifest
from spoteval.store import Store, StoreError

#: the drill's option for each field an EvalError names
OPTIONS = {
    "task": "--task",
    "workdir": "--workdir",
    "requirements": "--requirements",
    "exclude": "--exclude",
    "ship_credentials": "--ship-credential",
    "samples": "--samples",
}


@dataclass(frozen=True)
class DrillBundle:
    bundle: Bundle
    entries: list[ManifestEntry]
    command: tuple[str, ...]  # the episode command every node runs
    eval_env: dict[str, Any] | None  # the agent's eval_env (without venvs_dir)
    statement: str | None  # the shard plan, as the drill states it
    base: Path  # where the drill runs (relative paths, and the model server's folder)


def _failed(exc: EvalError | ProjectError) -> DrillError:
    return DrillError(f"{OPTIONS.get(exc.field, '--' + exc.field)}: {exc}")


def _user_eval(cfg: DrillConfig, base: Path) -> UserEval:
    own = cfg.own
    task, options = own.task, dict(own.options)
    if cfg.harness is not None and task is None:
        from spoteval.harness.tasks import shipped

        block, _ = shipped(cfg.harness)
        task, options = block.task, {**dict(block.options), **options}
    return UserEval(
        harness=cfg.harness,
        task=task,
        options=options,
        workdir=own.workdir,
        requirements=own.requirements,
        excludes=own.excludes,
        ship_credentials=own.ship_credentials,
    )


def _without_out(cfg: DrillConfig, resolved: ResolvedEval) -> ResolvedEval:
    """The drill's own output folder never ships, when it lies inside the eval project."""
    project = resolved.project
    out = cfg.out.resolve()
    if project is None or not out.is_relative_to(project.root):
        return resolved
    pattern = "/" + out.relative_to(project.root).as_posix() + "/"
    return replace(resolved, project=replace(project, excludes=(*project.excludes, pattern)))


def _requirement_lines(cfg: DrillConfig, resolved: ResolvedEval) -> list[str]:
    env = resolved.eval_env or {}
    if "requirements" in env:
        return list(env["requirements"])
    if resolved.project is not None and resolved.project.requirements_file is not None:
        return (resolved.project.root / resolved.project.requirements_file).read_text().splitlines()
    return []


def check_harness(cfg: DrillConfig, resolved: ResolvedEval) -> None:
    """The harness is in the drill's Python, or the requirements install it on the node."""
    if cfg.harness is None or names_harness(cfg.harness, _requirement_lines(cfg, resolved)):
        return
    module, requirement = PACKAGES[cfg.harness]
    if importlib.util.find_spec(module) is None:
        raise DrillError(
            f"--harness {cfg.harness} needs {requirement.split('>')[0].split('[')[0]}, which this Python "
            f"does not have: install it with `{sys.executable} -m pip install '{requirement}'` (or name "
            "it in --requirements, and the drill's node installs it as a node would)"
        )


def _timing(cfg: DrillConfig) -> Timing | None:
    folder = cfg.own.timing_from
    if folder is None:
        return None
    assert cfg.harness is not None
    try:
        log = json.loads((folder / "drill.json").read_text())
        store = Store(str(log["store"]))
        timing = timing_from_record(store, str(log["run_id"]), cfg.harness)
    except (OSError, ValueError, KeyError, StoreError) as exc:
        raise DrillError(f"--timing-from {folder}: no drill record there ({exc})") from None
    if timing is None:
        raise DrillError(f"--timing-from {folder}: its run has no completed {cfg.harness} shard")
    return timing


def _samples(cfg: DrillConfig, bundle: Bundle, resolved: ResolvedEval) -> list[SampleId]:
    own = cfg.own
    assert cfg.harness is not None and resolved.node_task is not None
    if isinstance(own.samples, tuple):
        return list(own.samples)
    if isinstance(own.samples, int) and cfg.harness == "lm-eval":
        return list(range(own.samples))
    if own.task is None:  # the shipped task: its ids are known without the harness
        from spoteval.harness.tasks import shipped

        ids = shipped(cfg.harness)[1]
        return ids[: own.samples] if isinstance(own.samples, int) else ids
    try:
        ids = list_in_bundle(bundle, cfg.harness, resolved.node_task, own.task_args, resolved.node_options)
    except EvalError as exc:
        raise _failed(exc) from None
    if isinstance(own.samples, int):
        if own.samples > len(ids):
            raise DrillError(f"--samples {own.samples} is more than the task's {len(ids)} samples")
        ids = ids[: own.samples]
    return ids


def _shards(cfg: DrillConfig, bundle: Bundle, resolved: ResolvedEval) -> tuple[ShardPlan, HarnessBlock]:
    own: OwnEval = cfg.own
    assert cfg.harness is not None and resolved.node_task is not None
    block = HarnessBlock(
        harness=cfg.harness,
        task=resolved.node_task,
        model="standin",
        args=dict(own.task_args),
        options=dict(resolved.node_options),
        episode_size=own.shard_size,
        sample_s=own.sample_s,
        startup_s=own.startup_s,
    )
    samples = _samples(cfg, bundle, resolved)
    try:
        return plan(block, samples, parallel=cfg.concurrency * cfg.nodes, timing=_timing(cfg)), block
    except ValueError as exc:
        raise DrillError(f"--samples: {exc}") from None


def prepare(cfg: DrillConfig, base: Path | None = None) -> DrillBundle:
    """The drill's bundle, manifest and episode command (DrillError: one line, nothing written)."""
    base = (base or Path.cwd()).resolve()
    try:
        resolved = _without_out(cfg, resolve(_user_eval(cfg, base), base))
        bundle = build_bundle(project=resolved.project)
        check_in_bundle(resolved, bundle)
    except (EvalError, ProjectError) as exc:
        raise _failed(exc) from None
    check_harness(cfg, resolved)
    statement = None
    if cfg.harness is not None:
        shards, block = _shards(cfg, bundle, resolved)
        entries = list(shards.entries)
        command = tuple(episode_command(block))
        statement = f"harness {cfg.harness} task {cfg.own.task or resolved.node_task}: {shards.describe()}"
    elif cfg.manifest is not None:
        try:
            entries = parse_manifest(cfg.manifest.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DrillError(f"--manifest {cfg.manifest}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise DrillError(f"--manifest {cfg.manifest}: {exc}") from None
        command = cfg.eval_command or sample_eval_command(cfg)
    else:
        width = max(4, len(str(cfg.episodes)))
        entries = [ManifestEntry(f"ep-{i:0{width}d}", {"index": i}) for i in range(1, cfg.episodes + 1)]
        command = cfg.eval_command or sample_eval_command(cfg)
    return DrillBundle(bundle, entries, tuple(command), resolved.eval_env, statement, base)
