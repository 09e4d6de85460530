"""What the restart measurement runs against: the stack's outputs, its grant, what its config adds.

`read_stack` is the one reader of a stack's inputs; the operator (`spoteval.operate.inputs`) reads
with it too, wording only `pulumi stack output`'s failures its own way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoteval.clouds import (
    ControlPlaneError,
    StackOutputs,
)
from spoteval.config_reader import DocumentError, describe, read_mapping
from spoteval.grant import Grant, GrantError
from spoteval.measure.phases import MeasureError
from spoteval.stack import (
    StackNotFound,
    StackOutputError,
    find_stack,
    pulumi_stack_output,
    read_json,
    stack_settings,
)

# --- inputs -----------------------------------------------------------------------------------


def _load_mapping(path: Path, what: str) -> Any:
    try:
        return read_mapping(path, json_first=True)  # JSON first: YAML 1.1 reads 1e-05 as a string
    except DocumentError as exc:
        raise MeasureError(describe(exc, what)) from None


def load_grant(path: Path) -> Grant:
    raw = _load_mapping(path, "grant file")
    if isinstance(raw, Mapping):
        for key in ("spot-eval:grant", "grant"):
            if key in raw and len(raw) == 1:
                raw = raw[key]
    try:
        return Grant.parse(raw, where=f"{path}")
    except GrantError as exc:
        raise MeasureError(str(exc)) from None


def stack_outputs(stack: str) -> Any:
    """`pulumi stack output --json --stack NAME`, parsed."""
    try:
        return pulumi_stack_output(stack, timeout_s=300)
    except StackOutputError as exc:
        if exc.reason == "no-cli":
            raise MeasureError(
                f"--stack {stack}: the pulumi CLI is not on PATH "
                "(or pass the outputs with --outputs FILE.json)"
            ) from None
        if exc.reason == "cannot-run":
            raise MeasureError(f"--stack {stack}: pulumi stack output: {exc.detail}") from None
        if exc.reason == "not-json":
            raise MeasureError(f"--stack {stack}: pulumi stack output did not print JSON") from None
        lines = (exc.stderr or exc.stdout).strip().splitlines()
        raise MeasureError(
            f"--stack {stack}: pulumi stack output failed: {lines[-1] if lines else exc.returncode}"
        ) from None


@dataclass(frozen=True)
class Inputs:
    """What the measurement runs against: the outputs, the grant, and what the stack config adds."""

    outputs: StackOutputs
    grant: Grant
    source: str
    #: from the stack config: the workload's price for the market, the provider's own block
    configured_price: float | None = None
    provider_block: Mapping[str, Any] = field(default_factory=dict)


def stack_config(stacks_dir: Path | None, stack: str) -> tuple[Path, Mapping[str, Any]]:
    """The `spot-eval:` keys of stacks/Pulumi.NAME.yaml, without the namespace; the stack is found
    as every command finds it (a missing one says so, before `pulumi` is asked anything)."""
    try:
        path = find_stack(stack, stacks_dir)
    except StackNotFound as exc:
        raise MeasureError(str(exc)) from None
    return path, stack_settings(_load_mapping(path, "stack file"))


def workload_price(config: Mapping[str, Any], market: str) -> float | None:
    """The stack's `workload.prices` for the market (the price where no API gives one)."""
    workload = config.get("workload")
    prices = workload.get("prices") if isinstance(workload, Mapping) else None
    value = prices.get(market) if isinstance(prices, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


@dataclass(frozen=True)
class StackRead:
    """A stack as the measurement and the operator read it: its parsed outputs, its grant (a grant
    file's, else the stack file's, else none), where the outputs came from, the stack file's
    `spot-eval:` settings and the stack file (None for saved outputs)."""

    outputs: StackOutputs
    grant: Grant
    source: str
    settings: Mapping[str, Any]
    path: Path | None

    @property
    def configured_price(self) -> float | None:
        return workload_price(self.settings, self.outputs.market)

    @property
    def provider_block(self) -> Mapping[str, Any]:
        block = self.settings.get(self.outputs.provider)
        return block if isinstance(block, Mapping) else {}


def read_stack(
    *,
    stack: str | None,
    outputs_file: str | None,
    stacks_dir: Path | None,
    grant_file: str | None,
    error: type[Exception],
    stack_output: Callable[[str], Any],
    refuse_empty: bool = False,
) -> StackRead:
    """The one reader of a stack's inputs: `stack`'s file and outputs (`stack_output(stack)`, which
    words its own failures), or the `outputs_file`; every problem is `error` with one line. With
    `refuse_empty`, outputs that are empty (a stack never deployed) are refused by name."""
    settings: Mapping[str, Any] = {}
    path: Path | None = None
    grant = Grant()
    try:
        if stack:
            path, settings = stack_config(stacks_dir, stack)
            grant = Grant.parse(settings.get("grant"), where=f"{path}: spot-eval:grant")
            raw = stack_output(stack)
            source = f"stack {stack}"
            if refuse_empty and (raw == {} or raw is None):
                raise error(f"--stack {stack}: the stack has no outputs (deploy it with pulumi up first)")
        else:
            source = str(outputs_file)
            try:
                raw = read_json(Path(source))
            except DocumentError as exc:
                raise error(f"--outputs {describe(exc, 'outputs file')}") from None
            if refuse_empty and raw == {}:
                raise error(f"--outputs {source}: no outputs (the stack was never deployed?)")
        if grant_file:
            grant = load_grant(Path(grant_file))
        outputs = StackOutputs.parse(raw, where=source)
    except (MeasureError, GrantError, ControlPlaneError) as exc:
        raise error(str(exc)) from None
    return StackRead(outputs, grant, source, settings, path)


def load_inputs(
    *, stack: str | None, outputs: str | None, grant: str | None, stacks_dir: str | Path | None
) -> Inputs:
    """The outputs (`stack`'s, or the `outputs` file), the grant (a `grant` file, else the stack's)."""
    read = read_stack(
        stack=stack,
        outputs_file=outputs,
        stacks_dir=Path(stacks_dir) if stacks_dir else None,
        grant_file=grant,
        error=MeasureError,
        stack_output=stack_outputs,
    )
    return Inputs(
        read.outputs,
        read.grant,
        read.source,
        configured_price=read.configured_price,
        provider_block=read.provider_block,
    )
