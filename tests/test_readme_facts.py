"""What the README lists agrees with the code: every stack, every option, every file the drill writes;
every command's `--help` explains each option and shows its default; the fewest-nodes hint appears
for one node too.

Before: the stack table listed 4 of 6 stacks, the placement options table lacked `--from-run`,
`--store` and `--offers`, the drill's file list lacked `workload.json`, `measure_restart --help`
showed no defaults, and one node missing a 6 h deadline got `Decision: none` with no hint.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts import measure_restart, operate, placement, plan, report
from spoteval.placement import parse_workload, place
from spoteval.placement.workload import EXAMPLE_WORKLOAD_YAML, PlacementError
from spoteval.stack import known_stacks

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "placement": placement.build_parser,
    "plan": plan.build_parser,
    "report": report._parser,
    "measure_restart": measure_restart.parser,
    "operate": operate.parser,
}


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start : end if end > 0 else None]


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def test_the_stack_table_lists_every_stack() -> None:
    text = section("## Infrastructure: the Pulumi program")
    table = text[text.index("| stack | capacity | model |") :].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", table, flags=re.MULTILINE)
    assert sorted(listed) == known_stacks(REPO / "stacks")


@pytest.mark.parametrize(
    ("name", "title"),
    [("placement", "## The placement decision"), ("measure_restart", "## Measuring the restart cost S")],
)
def test_the_options_tables_list_every_option(name: str, title: str) -> None:
    text = section(title)
    for action in options(PARSERS[name]()):
        flag = max(action.option_strings, key=len)
        assert f"`{flag}" in text, f"{name}: {flag} is not in the README's options"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_help_explains_every_option_and_shows_its_default(name: str) -> None:
    parser = PARSERS[name]()
    for action in options(parser):
        flag = max(action.option_strings, key=len)
        assert action.help, f"{name} {flag}: no help"
        if action.default not in (None, False, [], argparse.SUPPRESS):
            assert "default" in action.help, f"{name} {flag}: its default {action.default!r} is not shown"
    text = parser.format_help()
    assert "Exit codes" in text, f"{name}: --help does not give the exit codes"


def test_measure_restart_help_explains_cycles_mode_and_leave() -> None:
    text = " ".join(measure_restart.parser().format_help().split())
    assert "how many restarts to measure" in text and "(default: 3)" in text
    assert "preempt: the provider takes it as in a preemption" in text and "(default: stop-start)" in text
    assert "stopped keeps the GPU from billing" in text and "(default: stopped)" in text


def test_the_drills_file_list_names_every_file_it_writes() -> None:
    text = section("## Rehearse the whole run on this machine")
    for name in (
        "timeline.png",
        "report.txt",
        "report.json",
        "drill.json",
        "workload.json",
        "manifest.jsonl",
    ):
        assert f"`{name}`" in text, name


def test_the_example_workload_file_is_the_built_in_example() -> None:
    assert (REPO / "docs" / "workload-example.yaml").read_text() == EXAMPLE_WORKLOAD_YAML


def test_one_node_missing_its_deadline_is_told_how_many_nodes_would_meet_it() -> None:
    # on-demand's 12.7 h fits 13 h, spot's 14.1 h does not: two spot nodes would
    one = parse_workload({**_example(), "deadline_hours": 13})
    placed = place(one, 0.0, 2000)
    assert placed.break_even.nodes_for_deadline == 2
    assert placed.decision == "none"
    assert placed.reasons[-1] == (
        "2 spot nodes sharing the queue (`nodes: 2` in the workload, `node.count: 2` in a stack) would "
        "meet the 13 h deadline (closed form; see the break-even)."
    )
    two = place(parse_workload({**_example(), "deadline_hours": 13, "nodes": 2}), 1.0, 2000)
    assert two.decision == "spot" and two.break_even.nodes_for_deadline == 2
    # shorter than the work at on-demand speed: refused, naming the nodes that would fit it
    with pytest.raises(PlacementError, match=r"the work fits by then only on 3 or more nodes\)$"):
        parse_workload({**_example(), "deadline_hours": 6})
    meets = parse_workload({**_example(), "deadline_hours": 24})
    assert place(meets, 1.0, 2000).break_even.nodes_for_deadline is None  # one node suffices: no hint


def _example() -> dict[str, object]:
    from spoteval.placement import EXAMPLE_WORKLOAD

    return dict(EXAMPLE_WORKLOAD)
