"""What every provider module shares: the build context, the stack outputs, the `ProviderModule`
protocol that components/registry.py hands out, and `child()`/`held()` resource options."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final, Protocol

import pulumi

from components.bundle import Bundle, build_bundle, write_bundle
from components.capture import EVENT_CAPTURE, event_capture
from components.settings import ProviderSettings, Settings, SettingsError
from spoteval.clouds import OUTPUT_KEYS

PROJECT_DIR: Final = Path(__file__).resolve().parent.parent
#: renders (tests, scripts/plan.py) fix the clock so that what they print is repeatable
CLOCK: ContextVar[datetime | None] = ContextVar("spot_eval_clock", default=None)
#: the stack file being rendered (scripts/plan.py, the tests); `pulumi up`: stacks/Pulumi.STACK.yaml
STACK_FILE: ContextVar[Path | None] = ContextVar("spot_eval_stack_file", default=None)


def repository_of(path: Path) -> Path:
    """The repository a stack file belongs to: the nearest folder above it with `.git` or
    `Pulumi.yaml`, else the folder that holds it. The eval block's paths are relative to it."""
    folder = path.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists() or (candidate / "Pulumi.yaml").is_file():
            return candidate
    return folder


def stack_base(settings: Settings) -> Path:
    """The folder relative `eval.task`, `eval.workdir` and `eval.requirements` paths start from."""
    rendered = STACK_FILE.get()
    return repository_of(rendered or PROJECT_DIR / "stacks" / f"Pulumi.{settings.stack}.yaml")


#: stack outputs, the same names on every provider (`pulumi stack output --json` is read by the
#: scripts through spoteval.clouds, which owns the list)
#: every output of a stack: the control planes' keys, then `pool_size` (the size a pool stack declares
#: for its group, 0 otherwise; spoteval/clouds/groups.py reads it)
OUTPUT_NAMES: Final = (*OUTPUT_KEYS, "pool_size")


@dataclass(frozen=True)
class BuildContext:
    """What a provider module needs besides the settings; `now` is passed in so renders are repeatable."""

    now: datetime
    bundle_path: Path  # the agent bundle archive (components/bundle.py)
    manifest_path: Path | None  # the run's manifest file, when the stack names one


@dataclass(frozen=True)
class StackOutputs:
    bucket_url: pulumi.Input[str]
    node_ids: pulumi.Input[list[str]]
    zone: pulumi.Input[str]
    pool_size: int = 0  # a group's size (an Auto Scaling group, a scale set); 0 for single nodes

    def export(self, settings: Settings) -> None:
        values: dict[str, pulumi.Input[object]] = {
            "provider": settings.provider,
            "region": settings.region,
            "zone": self.zone,
            "node_ids": self.node_ids,
            "instance_type": settings.node.instance_type,
            "market": settings.node.market,
            "bucket_url": self.bucket_url,
            "run_id": settings.run_id,
            "server_port": settings.server.port,
            "address_kind": settings.address_kind,
            "pool_size": self.pool_size,
        }
        assert tuple(values) == OUTPUT_NAMES
        for name, value in values.items():
            pulumi.export(name, value)
        capture = event_capture(settings)
        if capture is not None:  # where the provider's interruption events are kept (spoteval/events)
            pulumi.export(EVENT_CAPTURE, capture)


class ProviderModule(ProviderSettings, Protocol):
    """One module per provider (components/aws.py ... runpod.py): parses its own block of the stack
    config (`parse_settings`) and declares the stack's resources (`build`)."""

    def build(self, settings: Settings, context: BuildContext) -> StackOutputs: ...


def child(
    parent: pulumi.Resource, *, depends_on: list[pulumi.Resource] | None = None
) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on)


def held(
    parent: pulumi.Resource, *, depends_on: list[pulumi.Resource] | None = None
) -> pulumi.ResourceOptions:
    """Options of what holds results or cached weights: never deleted by Pulumi, not even by `destroy`."""
    return pulumi.ResourceOptions(parent=parent, protect=True, retain_on_delete=True, depends_on=depends_on)


def short_hash(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def manifest_path(settings: Settings, bundle: Bundle, project_dir: Path = PROJECT_DIR) -> Path | None:
    """The stack's manifest file, checked with the run record's own parser."""
    from spoteval.manifest import parse_manifest
    from spoteval.record import RecordError

    if settings.eval.harness is not None:
        return harness_manifest_path(settings, bundle)
    if settings.eval.manifest is None:
        return None
    path = project_dir / settings.eval.manifest
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError("eval.manifest", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        entries = parse_manifest(text)
    except RecordError as exc:
        raise SettingsError("eval.manifest", f"{path}: {exc}") from None
    if settings.workload is not None and len(entries) != settings.workload.episodes:
        raise SettingsError(
            "workload.episodes",
            f"{settings.workload.episodes} differs from the {len(entries)} episodes "
            f"of {settings.eval.manifest}",
        )
    return path


def harness_manifest_path(settings: Settings, bundle: Bundle) -> Path:
    """The shard manifest of the stack's harness (components/eval_settings.py), its plan stated: the
    task is checked in, and its samples listed from, the bundle as built."""
    from components.eval_settings import check_task, resolve_eval, shard_plan, statement, write_manifest

    harness = settings.eval.harness
    assert harness is not None
    resolved = resolve_eval(harness, settings.eval.project, stack_base(settings), SettingsError)
    checked = check_task(resolved, bundle, SettingsError)
    shards = shard_plan(
        harness,
        settings.server.model,
        settings.eval.concurrency * max(1, settings.node.count),
        SettingsError,
        resolved=resolved,
        bundle=bundle,
    )
    if settings.workload is not None and len(shards.entries) != settings.workload.episodes:
        raise SettingsError(
            "workload.episodes",
            f"{settings.workload.episodes} differs from the {len(shards.entries)} shards of eval.harness",
        )
    pulumi.log.info(statement(harness, shards, checked))
    return write_manifest(shards)


def stack_bundle(settings: Settings, project_dir: Path = PROJECT_DIR) -> Bundle:
    """The agent bundle with the stack's eval project (eval.task's folder, or eval.workdir)."""
    from components.eval_settings import resolve_eval

    resolved = resolve_eval(settings.eval.harness, settings.eval.project, stack_base(settings), SettingsError)
    from spoteval.bundle.project import ProjectError

    try:
        return build_bundle(project_dir, project=resolved.project)
    except ProjectError as exc:
        raise SettingsError(f"eval.{exc.field}", str(exc)) from None


def build_context(settings: Settings, project_dir: Path = PROJECT_DIR) -> BuildContext:
    """Everything besides settings a provider module needs; reads files, so it runs after `parse`."""
    bundle = stack_bundle(settings, project_dir)
    return BuildContext(
        now=CLOCK.get() or datetime.now(timezone.utc),
        bundle_path=write_bundle(bundle),
        manifest_path=manifest_path(settings, bundle, project_dir),
    )
