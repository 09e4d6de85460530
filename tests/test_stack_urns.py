"""Resource URNs stay as they were: every stack (and its pool, no-compute, on-demand and static-address
variants, where the stack accepts them) renders under the mock engine to exactly the URNs recorded in
tests/data/stack_urns.json. A change of a URN makes `pulumi up` replace the resource (a bucket of
results, a weights disk): a refactor that moves a component carries `aliases` instead.

Moved so far, from the Node component (which exists only with `node.count: 1`): the weights-cache disk
of the AWS, GCP and Azure stacks, to a WeightsCache component declared whatever the count, market or
pool mode; the static address of a single AWS or Azure node, to a StaticAddress component declared
with `node.count: 0` too. Each alias names the URN it had under Node, so an existing stack keeps the
resource."""

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


#: (label, URN now, URN before the move that its alias names)
MOVED = [
    (
        label,
        f"urn:pulumi:{label.split('+')[0]}::spot-eval::spot-eval:{provider}:{component}${token}::{name}",
        f"urn:pulumi:{label.split('+')[0]}::spot-eval::spot-eval:{provider}:Node${token}::{name}",
    )
    for label, provider, component, token, name in (
        ("aws-us-east-1", "aws", "WeightsCache", "aws:ebs/volume:Volume", "qwen7b-drill-aws-weights-cache"),
        ("gcp-us-central1", "gcp", "WeightsCache", "gcp:compute/disk:Disk", "qwen7b-drill-gcp-weights-cache"),
        (
            "azure-eastus",
            "azure",
            "WeightsCache",
            "azure-native:compute:Disk",
            "qwen3b-drill-azure-weights-cache",
        ),
        (
            "aws-us-east-1+static-address",
            "aws",
            "StaticAddress",
            "aws:ec2/eip:Eip",
            "qwen7b-drill-aws-address",
        ),
        (
            "azure-eastus",
            "azure",
            "StaticAddress",
            "azure-native:network:PublicIPAddress",
            "qwen3b-drill-azure-address",
        ),
    )
]


@pytest.mark.parametrize(
    ("label", "now", "before"), MOVED, ids=[f"{m[0]}:{m[1].split('::')[-1]}" for m in MOVED]
)
def test_a_moved_resource_keeps_its_old_urn_as_an_alias(label: str, now: str, before: str) -> None:
    config = copy.deepcopy(read_stack_config(STACKS[label.split("+", maxsplit=1)[0]]))
    for path, value in RECORDED[label]["changes"].items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    rendered = render_config(label.split("+", maxsplit=1)[0], config, now=NOW)
    moved = rendered.by_urn(now)
    assert moved is not None
    assert moved.aliases == (before,)
    assert before not in {d.urn for d in rendered.resources}
    # the weights disk: every variant (count 0, pool, on-demand, static address) declares it
    stack = label.split("+", maxsplit=1)[0]
    if now.endswith("-weights-cache"):
        assert moved.protect and moved.retain_on_delete
        assert all(now in RECORDED[other]["urns"] for other in RECORDED if other.split("+")[0] == stack)


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_urns_are_unchanged(label: str) -> None:
    entry = RECORDED[label]
    config = copy.deepcopy(read_stack_config(STACKS[label.split("+", maxsplit=1)[0]]))
    for path, value in entry["changes"].items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    rendered = render_config(label.split("+", maxsplit=1)[0], config, now=NOW)
    assert sorted(d.urn for d in rendered.resources) == entry["urns"]
