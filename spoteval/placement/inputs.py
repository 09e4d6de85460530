"""Where a workload comes from: a YAML file, a stack's `spot-eval:workload` block, or the example.

Each gives a `LoadedWorkload`: the raw mapping, the key prefix its errors use, a description for the
report, and (for a stack) what the stack decides beyond the block:

- **one grant**: a stack has one grant, `spot-eval:grant`, which `plan`, every check before a start
  and the placement all read. The workload block inherits it and may not carry its own: a
  `spot-eval:workload.grant` is refused with the migration (`SECOND_GRANT`);
- **what the stack can declare**: an option the stack cannot declare (a market its provider's
  stacks refuse, as `spoteval.stack.market_refusal` says; a box nobody takes back) is left out of
  the decision, with the reason (`Workload.left_out`).

`labels` say where an input came from when it is not the file itself (a run record's measurement,
a lower bound), for the text report. Problems are `PlacementError`s naming the file, option or key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spoteval.config_reader import DocumentError, describe, read_mapping
from spoteval.grant import Grant, GrantError
from spoteval.placement.workload import EXAMPLE_WORKLOAD, OPTIONS, PlacementError, Workload, parse_workload
from spoteval.stack import PREFIX, StackNotFound, find_stack, market_refusal, shown_path, stack_settings

STACK_WORKLOAD_KEY: Final = f"{PREFIX}workload"
STACK_GRANT_KEY: Final = f"{PREFIX}grant"
#: the one line that refuses a second grant in a stack (`spot-eval:workload.grant`)
SECOND_GRANT: Final = (
    f"a stack has one grant, {STACK_GRANT_KEY}, which its workload block inherits: delete "
    f"{STACK_WORKLOAD_KEY}.grant (move any limit it sets into {STACK_GRANT_KEY})"
)
#: why a stack's placement leaves out the box nobody takes back
NOT_A_MARKET: Final = (
    "a stack declares spot or on-demand nodes (node.market), not a box nobody takes back: "
    "compare with one in a workload file"
)


@dataclass(frozen=True)
class LoadedWorkload:
    """A raw workload mapping, the key prefix its errors use, and a description for the report.

    `grant`: the stack's grant, which replaces the workload's (None: the workload's own `grant:`);
    `left_out`: option -> why the stack cannot declare it; `labels`: input key -> where it came
    from, when that is not `source` (a measurement, a bound)."""

    raw: Mapping[str, Any]
    where: str
    source: str
    grant: Grant | None = None
    left_out: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    def parse(self) -> Workload:
        """The workload, with the stack's grant and the options it leaves out."""
        workload = parse_workload(self.raw, where=self.where)
        changes: dict[str, Any] = {}
        if self.grant is not None:
            changes["grant"] = self.grant
        if self.left_out:
            changes["left_out"] = tuple(self.left_out.items())
        return dataclasses.replace(workload, **changes) if changes else workload


def placement_error(err: DocumentError, what: str) -> PlacementError:
    """A file the placement could not use, as one line: the file, then what is wrong (and where)."""
    return PlacementError(str(err.path), describe(err, what).removeprefix(f"{err.path}: "))


def load_yaml(path: Path, what: str) -> Mapping[str, Any]:
    """A YAML file of keys; missing, empty or malformed, it is a `PlacementError` naming the file."""
    try:
        return read_mapping(path)
    except DocumentError as err:
        raise placement_error(err, what) from None


def load_workload_file(path: Path) -> LoadedWorkload:
    """A workload YAML file."""
    return LoadedWorkload(raw=load_yaml(path, "workload file"), where="workload", source=str(path))


def stack_grant(settings: Mapping[str, Any], where: str) -> Grant:
    """The stack's one grant (`spot-eval:grant`), parsed; its errors name the key in the stack."""
    try:
        return Grant.parse(settings.get("grant"), where=f"{where}{STACK_GRANT_KEY}")
    except GrantError as err:
        raise PlacementError(err.key, str(err).removeprefix(f"{err.key}: ")) from None


def refuse_second_grant(block: Mapping[str, Any], where: str) -> None:
    """A stack's workload block may not carry a grant of its own (see `SECOND_GRANT`)."""
    if block.get("grant") is not None:
        raise PlacementError(f"{where}{STACK_WORKLOAD_KEY}.grant", SECOND_GRANT)


def stack_left_out(settings: Mapping[str, Any], block: Mapping[str, Any]) -> dict[str, str]:
    """The options of a stack's workload that the stack cannot declare, each with the reason: a
    market the settings refuse for its provider, and a non-preemptible box when the block prices one."""
    out: dict[str, str] = {}
    provider = settings.get("provider")
    for option in OPTIONS[:2]:
        refusal = market_refusal(provider, option) if provider is not None else None
        if refusal is not None:
            out[option] = f"this stack cannot declare it: {refusal}"
    prices = block.get("prices")
    if isinstance(prices, Mapping) and prices.get("non_preemptible") is not None:
        out["non_preemptible"] = NOT_A_MARKET
    return out


def stack_workload(
    name: str, settings: Mapping[str, Any], source: str, *, where: str = ""
) -> LoadedWorkload | None:
    """A stack's workload block with the stack's grant and the options it leaves out; None when the
    stack has no block. `where` prefixes the keys of its errors (`stack NAME: `)."""
    block = settings.get("workload")
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise PlacementError(f"{where}{STACK_WORKLOAD_KEY}", f"must be a mapping, got {type(block).__name__}")
    refuse_second_grant(block, where)
    grant = stack_grant(settings, where)
    return LoadedWorkload(
        raw=block,
        where=f"{where}{STACK_WORKLOAD_KEY}",
        source=source,
        grant=grant,
        left_out=stack_left_out(settings, block),
    )


def read_stack_settings(name: str, stacks_dir: Path | None) -> tuple[Path, dict[str, Any]]:
    """The stack's file (found as every command finds it) and its `spot-eval:*` settings."""
    try:
        path = find_stack(name, stacks_dir)
    except StackNotFound as exc:
        raise PlacementError(exc.subject, exc.problem) from None
    return path, stack_settings(load_yaml(path, "stack file"))


def load_stack_workload(name: str, stacks_dir: Path | None) -> LoadedWorkload:
    """The `spot-eval:workload` block of `stacks_dir/Pulumi.NAME.yaml`, under the stack's grant."""
    path, settings = read_stack_settings(name, stacks_dir)
    shown = shown_path(path)
    loaded = stack_workload(name, settings, f"stack {name} ({shown})")
    if loaded is None:
        raise PlacementError(
            f"{shown}: config.{STACK_WORKLOAD_KEY}", "missing: the stack has no workload block"
        )
    return loaded


def example_workload() -> LoadedWorkload:
    """The built-in example."""
    return LoadedWorkload(raw=EXAMPLE_WORKLOAD, where="workload", source="built-in example workload")


#: stand-ins for the keys a partial workload may leave to a run record (`check_given`)
_STAND_INS: Final[Mapping[str, Any]] = {
    "episodes": 1,
    "concurrency": 1,
    "lifetime_hours": 1.0,
    "restart": {"wait_minutes": 0.0, "boot_minutes": 0.0},
    "prices": {"spot": 0.0},
}


def check_given(raw: Mapping[str, Any], where: str = "workload") -> None:
    """Check the keys a partial workload gives (a base for `--from-run` or the report) as the
    placement checks a whole one: a key that is there must be valid, even when a run's measurement
    will replace it. Missing keys are not an error here; `PlacementError` names the bad one."""
    filled: dict[str, Any] = dict(raw)
    for key, stand_in in _STAND_INS.items():
        given = raw.get(key)
        if given is None:
            filled[key] = stand_in
        elif isinstance(given, Mapping) and isinstance(stand_in, Mapping):
            filled[key] = {**stand_in, **given}
    if raw.get("episode_minutes") is None and raw.get("episode_minutes_samples") is None:
        filled["episode_minutes"] = 1.0
    interval = raw.get("lifetime_interval_hours")
    low = interval[0] if isinstance(interval, list | tuple) and interval else None
    if raw.get("lifetime_hours") is None and isinstance(low, int | float) and low > 0:
        filled["lifetime_hours"] = low  # inside the interval whatever its high end
    parse_workload(filled, where=where)
