"""Resource URNs stay as they were: every stack (and its pool, no-compute, on-demand and static-address
variants, where the stack accepts them) renders under the mock engine to exactly the URNs recorded in
tests/data/stack_urns.json. A change of a URN makes `pulumi up` replace the resource (a bucket of
results, a weights disk): a refactor that moves a component carries `aliases` instead.

Moved so far: the weights-cache disk of the AWS, GCP and Azure stacks, from the Node component (which
exists only with `node.count: 1`) to a WeightsCache component declared whatever the count, market or
pool mode. Its alias names the URN it had under Node, so an existing stack keeps the disk."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from components.mocks import read_stack_config, render_config, stack_files, stack_name

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "stack_urns.json").read_text(encoding="utf-8")
)
STACKS = {stack_name(p): p for p in stack_files()}
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_every_stack_file_is_recorded() -> None:
    assert sorted({label.split("+")[0] for label in RECORDED}) == sorted(STACKS)
    assert len(RECORDED) == 25  # Runpod refuses a static address


#: stack -> (URN now, URN before the move that its alias names)
MOVED = {
    stack: (
        f"urn:pulumi:{stack}::spot-eval::spot-eval:{provider}:WeightsCache${token}::{run_id}-weights-cache",
        f"urn:pulumi:{stack}::spot-eval::spot-eval:{provider}:Node${token}::{run_id}-weights-cache",
    )
    for stack, provider, token, run_id in (
        ("aws-us-east-1", "aws", "aws:ebs/volume:Volume", "qwen7b-drill-aws"),
        ("gcp-us-central1", "gcp", "gcp:compute/disk:Disk", "qwen7b-drill-gcp"),
        ("azure-eastus", "azure", "azure-native:compute:Disk", "qwen3b-drill-azure"),
    )
}


@pytest.mark.parametrize("stack", sorted(MOVED))
def test_a_moved_hold_keeps_its_old_urn_as_an_alias(stack: str) -> None:
    now, before = MOVED[stack]
    rendered = render_config(stack, read_stack_config(STACKS[stack]), now=NOW)
    moved = rendered.by_urn(now)
    assert moved is not None
    assert moved.aliases == (before,)
    assert moved.protect and moved.retain_on_delete
    assert before not in {d.urn for d in rendered.resources}
    # every variant of the stack (count 0, pool, on-demand, static address) declares it, same URN
    assert all(now in RECORDED[label]["urns"] for label in RECORDED if label.split("+")[0] == stack)


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_urns_are_unchanged(label: str) -> None:
    entry = RECORDED[label]
    config = copy.deepcopy(read_stack_config(STACKS[label.split("+", maxsplit=1)[0]]))
    for path, value in entry["changes"].items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    rendered = render_config(label.split("+", maxsplit=1)[0], config, now=NOW)
    assert sorted(d.urn for d in rendered.resources) == entry["urns"]
