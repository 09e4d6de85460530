"""Where a workload comes from: a YAML file, a stack's `spot-eval:workload` block, or the example.

Each gives a `LoadedWorkload`: the raw mapping, the key prefix its errors use, and a description for
the report. Problems are `PlacementError`s naming the file or option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spoteval.config_reader import DocumentError, read_document
from spoteval.placement.workload import EXAMPLE_WORKLOAD, PlacementError
from spoteval.stack import PREFIX, is_stack_name, read_stack_document, stack_file

STACK_WORKLOAD_KEY: Final = f"{PREFIX}workload"


@dataclass(frozen=True)
class LoadedWorkload:
    """A raw workload mapping, the key prefix its errors use, and a description for the report."""

    raw: Mapping[str, Any]
    where: str
    source: str


def _placement_error(err: DocumentError, what: str) -> PlacementError:
    if err.reason == "missing":
        return PlacementError(str(err.path), f"{what} not found")
    if err.reason == "unreadable":
        return PlacementError(str(err.path), f"cannot read the {what}: {err.text}")
    return PlacementError(str(err.path), f"malformed YAML{err.at}: {err.detail}")


def load_yaml(path: Path, what: str) -> object:
    """Load a YAML file; a missing file or malformed YAML is a `PlacementError` naming the file."""
    try:
        return read_document(path)
    except DocumentError as err:
        raise _placement_error(err, what) from None


def load_workload_file(path: Path) -> LoadedWorkload:
    """A workload YAML file."""
    raw = load_yaml(path, "workload file")
    if not isinstance(raw, Mapping):
        raise PlacementError(str(path), f"a workload must be a mapping of keys, got {type(raw).__name__}")
    return LoadedWorkload(raw=raw, where="workload", source=str(path))


def load_stack_workload(name: str, stacks_dir: Path) -> LoadedWorkload:
    """The `spot-eval:workload` block of `stacks_dir/Pulumi.NAME.yaml`."""
    if not is_stack_name(name):
        raise PlacementError("--stack", f"not a stack name: {name!r}")
    path = stack_file(stacks_dir, name)
    if not path.is_file():
        raise PlacementError("--stack", f"stack {name!r} not found: no {path}")
    try:
        doc = read_stack_document(path)
    except DocumentError as err:
        raise _placement_error(err, "stack file") from None
    config = doc.get("config") if isinstance(doc, Mapping) else None
    if not isinstance(config, Mapping) or config.get(STACK_WORKLOAD_KEY) is None:
        raise PlacementError(
            f"{path}: config.{STACK_WORKLOAD_KEY}", "missing: the stack has no workload block"
        )
    return LoadedWorkload(
        raw=config[STACK_WORKLOAD_KEY], where=STACK_WORKLOAD_KEY, source=f"stack {name} ({path})"
    )


def example_workload() -> LoadedWorkload:
    """The built-in example."""
    return LoadedWorkload(raw=EXAMPLE_WORKLOAD, where="workload", source="built-in example workload")
