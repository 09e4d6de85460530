"""Resource URNs stay as they were: every stack (and its pool, no-compute, on-demand and static-address
variants, where the stack accepts them) renders under the mock engine to exactly the URNs recorded in
tests/data/stack_urns.json. A change of a URN makes `pulumi up` replace the resource (a bucket of
results, a weights disk): a refactor that moves a component carries `aliases` instead."""

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
    assert len(RECORDED) == 26


@pytest.mark.parametrize("label", sorted(RECORDED))
def test_urns_are_unchanged(label: str) -> None:
    entry = RECORDED[label]
    config = copy.deepcopy(read_stack_config(STACKS[label.split("+", maxsplit=1)[0]]))
    for path, value in entry["changes"].items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    rendered = render_config(label.split("+", maxsplit=1)[0], config, now=NOW)
    assert sorted(d.urn for d in rendered.resources) == entry["urns"]
