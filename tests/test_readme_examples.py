"""Every `console` example of the README is run and its output compared (tests/readme_examples.py
says the convention): the README cannot drift from what the commands print.

Each example is one test, named by its README line; a command that several examples run (with the
same commands before it) runs once per session. A failure names the example's line, the command,
the README line that differs and the line the command printed instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.readme_examples import (
    README,
    ConventionError,
    Example,
    difference,
    examples,
    misplaced,
    normalise,
    run,
    scratch,
)

TEXT = README.read_text(encoding="utf-8")
try:
    EXAMPLES, PROBLEM = examples(TEXT), None
except ConventionError as exc:
    EXAMPLES, PROBLEM = [], str(exc)

#: (environment, the commands up to this one) -> (exit code, output): each distinct command once
_RAN: dict[tuple[str | None, tuple[str, ...]], tuple[int, str]] = {}


@pytest.fixture(scope="session")
def price_fakes_env() -> Iterator[dict[str, str]]:
    from tests.offers_demo import UNSET, price_fakes

    with price_fakes() as env:
        yield {**env, **dict.fromkeys(UNSET, "")}


def test_the_readme_follows_the_example_convention() -> None:
    assert PROBLEM is None, PROBLEM
    assert misplaced(TEXT) == []
    assert len([e for e in EXAMPLES if e.not_run is None]) >= 10  # the examples are run, not all listed


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(
    example: Example, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    if example.not_run is not None:
        pytest.skip(f"not run: {example.not_run}")
    env: dict[str, str] = request.getfixturevalue("price_fakes_env") if example.env == "price-fakes" else {}
    folder: Path | None = None
    texts: list[str] = []
    for i, command in enumerate(example.commands):
        texts.append(command.text)
        key = (example.env, tuple(texts))
        if key not in _RAN:
            if folder is None:
                folder = scratch(tmp_path_factory.mktemp("readme"))
                for earlier in example.commands[:i]:  # what the commands before it left in the folder
                    run(earlier.text, folder, env)
            _RAN[key] = run(command.text, folder, env)
        _, output = _RAN[key]
        problem = difference(command.expected, output.splitlines(), timings=example.timings)
        assert problem is None, (
            f"README.md line {example.line}, `$ {command.text}` (line {command.line}): {problem}\n"
            f"--- the command printed ---\n{output}"
        )


# --- the harness itself -----------------------------------------------------------------------------

SAMPLE = """\
Some text.

<!-- example: not run: needs a cloud account -->
```console
$ python -m scripts.operate --stack aws --once
operating run r1
```

```console
$ echo one \\
    two
one two
$ printf 'a\\nb\\nc\\n'
a
...
c
```

```
$ forgotten --command
```
"""


def test_the_harness_reads_commands_outputs_and_directives() -> None:
    found = examples(SAMPLE)
    assert [(e.line, e.not_run, [c.text for c in e.commands]) for e in found] == [
        (4, "needs a cloud account", ["python -m scripts.operate --stack aws --once"]),
        (9, None, ["echo one two", "printf 'a\\nb\\nc\\n'"]),
    ]
    assert found[1].commands[1].expected == ((14, "a"), (15, "..."), (16, "c"))
    assert misplaced(SAMPLE) == [
        "README.md line 19: a block with `$ ` commands must be a console block (run, or marked not run)"
    ]
    with pytest.raises(ConventionError, match="line 2: `not run` needs its reason"):
        examples("<!-- example: not run -->\n```console\n$ x\n```\n")
    with pytest.raises(ConventionError, match="unknown environment 'aws'"):
        examples("<!-- example: env aws -->\n```console\n$ x\n```\n")


def test_a_changed_output_names_the_readme_line_and_what_was_printed() -> None:
    expected = ((20, "spot-eval placement"), (21, "  spot 15.6"), (22, "Decision: spot"))
    assert difference(expected, ["spot-eval placement", "  spot 15.6", "Decision: spot", ""]) is None
    assert difference(expected, ["spot-eval placement", "  spot 15.7", "Decision: spot"]) == (
        "README line 21 differs from output line 2:\n  README: '  spot 15.6'\n  actual: '  spot 15.7'"
    )
    assert difference(expected, ["spot-eval placement", "  spot 15.6"]) == (
        "the output ends before README line 22:\n  README: 'Decision: spot'"
    )
    assert difference(expected[:2], ["spot-eval placement", "  spot 15.6", "more"]) == (
        "the output has more lines than the README shows, from output line 3:\n  actual: 'more'"
    )
    excerpt = ((1, "a"), (2, "..."), (3, "z"))
    assert difference(excerpt, ["a", "b", "c", "z"]) is None
    assert (
        difference(excerpt, ["a", "b"])
        == "README line 3 is not in the output after output line 1:\n  README: 'z'"
    )


def test_time_stamps_ports_and_ids_are_normalised_measured_numbers_only_with_timings() -> None:
    line = "[10:01:35] read 2026-12-01 13:20:13Z from http://127.0.0.1:48273 for i-0aa3bcb29fea4da3f, 6.2 s"
    assert normalise(line) == "[<time>] read <time> from http://127.0.0.1:<port> for i-<id>, 6.2 s"
    assert normalise("after 98 s and 3.5 min, 2 h; 12 episodes", timings=True) == (
        "after <t> s and <t> min, <t> h; 12 episodes"
    )
    assert normalise("drill-20261130-055710/report.txt  ") == "drill-<stamp>/report.txt"
