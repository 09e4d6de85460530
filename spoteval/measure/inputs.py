"""What the restart measurement runs against: the stack's outputs, its grant, what its config adds."""

from __future__ import annotations

from collections.abc import Mapping
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


def load_inputs(
    *, stack: str | None, outputs: str | None, grant: str | None, stacks_dir: str | Path | None
) -> Inputs:
    """The outputs (`stack`'s, or the `outputs` file), the grant (a `grant` file, else the stack's)."""
    config: Mapping[str, Any] = {}
    if stack:
        path, config = stack_config(Path(stacks_dir) if stacks_dir else None, stack)
        raw = stack_outputs(stack)
        try:
            allowed = Grant.parse(config.get("grant"), where=f"{path}: spot-eval:grant")
        except GrantError as exc:
            raise MeasureError(str(exc)) from None
        source = f"stack {stack}"
    else:
        path = Path(str(outputs))
        try:
            raw = read_json(path)
        except DocumentError as exc:
            raise MeasureError(f"--outputs {describe(exc, 'outputs file')}") from None
        allowed = Grant()
        source = str(path)
    if grant:
        allowed = load_grant(Path(grant))
    try:
        parsed = StackOutputs.parse(raw, where=source)
    except ControlPlaneError as exc:
        raise MeasureError(str(exc)) from None
    block = config.get(parsed.provider)
    return Inputs(
        parsed,
        allowed,
        source,
        configured_price=workload_price(config, parsed.market),
        provider_block=block if isinstance(block, Mapping) else {},
    )
