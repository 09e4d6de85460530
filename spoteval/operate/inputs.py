"""What the operator runs against: a stack's outputs, its grant, and the control plane of each node.

The stack is read by the one reader of a stack's inputs (`spoteval.measure.inputs.read_stack`: the
file `stacks/Pulumi.NAME.yaml` and `pulumi stack output`), or from saved outputs (`--outputs
FILE.json`) and a grant file. Problems are an
`OperateError` with one line naming the stack, file or key; nothing is started while reading.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from spoteval.clouds import (
    ControlPlane,
    ControlPlaneError,
    PlaneConfig,
    PlaneOptions,
    StackOutputs,
    open_plane,
)
from spoteval.grant import Grant
from spoteval.measure import inputs as measure_inputs
from spoteval.measure.phases import MeasureError
from spoteval.operate.deadline import DeadlineWatch
from spoteval.placement.live import live_policy
from spoteval.placement.workload import PlacementError, Workload, parse_workload
from spoteval.stack import StackOutputError, pulumi_stack_output

GCP_KEY_ENV: Final = "SPOTEVAL_GCP_BILLING_API_KEY"


class OperateError(Exception):
    """Bad input: the message names the stack, file or key."""


@dataclass(frozen=True)
class Inputs:
    outputs: StackOutputs
    grant: Grant
    source: str
    configured_price: float | None = None  # the workload's price for the market (no price API)
    provider_block: Mapping[str, Any] = field(default_factory=dict)
    #: the stack's workload when it has a deadline (the deadline rule's numbers), else None
    workload: Workload | None = None
    stack: str | None = None
    #: the deadline rule the operator watches (spoteval.operate.deadline), with such a workload
    watch: DeadlineWatch | None = None


def _deadline_workload(settings: Mapping[str, Any], where: str) -> Workload | None:
    """The stack's `spot-eval:workload` when it sets a deadline; a workload that does not parse is
    bad input (the deadline rule needs its numbers)."""
    raw = settings.get("workload")
    if not isinstance(raw, Mapping) or raw.get("deadline_hours") is None:
        return None
    try:
        return parse_workload(raw, where=where)
    except PlacementError as exc:
        raise OperateError(f"the deadline rule: {exc}") from None


def deadline_watch(inputs: Inputs) -> DeadlineWatch | None:
    """The deadline rule for the stack's workload (its policy chosen as the placement chooses it)."""
    if inputs.workload is None:
        return None
    try:
        policy = live_policy(inputs.workload)
    except PlacementError as exc:
        raise OperateError(f"the deadline rule: {exc}") from None
    return DeadlineWatch(inputs.workload, policy, inputs.stack) if policy else None


def load_grant(path: Path) -> Grant:
    try:
        return measure_inputs.load_grant(path)
    except MeasureError as exc:
        raise OperateError(str(exc)) from None


def _stack_output(stack: str) -> Any:
    """`pulumi stack output` of the stack, its failure worded for the operator."""
    try:
        return pulumi_stack_output(stack, timeout_s=300)
    except StackOutputError as exc:
        lines = (exc.stderr or exc.stdout).strip().splitlines()
        detail = {"no-cli": "the pulumi CLI is not on PATH (or pass --outputs FILE.json)"}.get(
            exc.reason, lines[-1] if lines else str(exc)
        )
        raise OperateError(f"--stack {stack}: pulumi stack output: {detail}") from None


def load_inputs(
    *, stack: str | None, outputs_file: str | None, stacks_dir: Path | None, grant_file: str | None
) -> Inputs:
    """The outputs and grant of `--stack NAME` (its file and `pulumi stack output`) or `--outputs`."""
    read = measure_inputs.read_stack(
        stack=stack,
        outputs_file=outputs_file,
        stacks_dir=stacks_dir,
        grant_file=grant_file,
        error=OperateError,
        stack_output=_stack_output,
        refuse_empty=True,
    )
    where = f"{read.path}: spot-eval:workload" if read.path is not None else "workload"
    found = Inputs(
        read.outputs,
        read.grant,
        read.source,
        configured_price=read.configured_price,
        provider_block=read.provider_block,
        workload=_deadline_workload(read.settings, where),
        stack=stack,
    )
    return replace(found, watch=deadline_watch(found))


def plane_config(inputs: Inputs, *, poll_s: float, price: float | None = None) -> PlaneOptions:
    """The control planes' settings from the stack's provider block and the environment."""
    block = inputs.provider_block

    def text(key: str) -> str | None:
        value = block.get(key)
        return value if isinstance(value, str) and value else None

    return PlaneConfig(
        configured_price=price if price is not None else inputs.configured_price,
        currency=inputs.grant.currency,
        poll_s=poll_s,
        gcp_billing_api_key=os.environ.get(GCP_KEY_ENV) or None,
        gcp_project=text("project"),
        azure_resource_group=text("resource_group"),
        k8s_namespace=text("namespace"),
    )


def open_planes(inputs: Inputs, config: PlaneOptions) -> dict[str, ControlPlane]:
    """A control plane for each node of the stack; a node the credentials cannot reach is an error."""
    out: dict[str, ControlPlane] = {}
    for node in inputs.outputs.node_ids:
        try:
            out[node] = open_plane(inputs.outputs, node, config, groups=True)
        except ControlPlaneError as exc:
            raise OperateError(f"node {node}: {exc}") from None
    return out


def refuse_out_of_context(args: argparse.Namespace) -> None:
    """Options that do not apply to what was asked are bad input (one line), not silently ignored."""
    if args.json and args.command != "status":
        raise OperateError("--json prints the statuses: use it with `status`")
    if args.once and args.command == "status":
        raise OperateError("--once checks and acts once: `status` only reads, give one or the other")
    if args.stacks_dir and not args.stack:
        raise OperateError("--stacks-dir is where --stack NAME is looked for: give --stack NAME with it")
