"""The README's examples as tests: read every `console` block, run its `$ ` commands, compare.

The convention (the README's "Development" section says the same to its readers):

- A fenced block whose info string is `console` is an example. Each line that starts with `$ ` is a
  command (a line ending in a backslash continues on the next); the lines after it, up to the next
  `$ ` line or the end of the block, are what it prints (stdout and stderr as a terminal shows them).
- A line `...` in the output stands for any number of lines: the example is an excerpt.
- An HTML comment on the line just before the fence says how the example runs:
  `<!-- example: not run: REASON -->` lists it without running it (it needs a cloud account, a
  deployed stack, a GPU; the reason is required, and is the rest of the comment);
  `<!-- example: env NAME -->` runs it with one of the environments the test provides
  (`ENVIRONMENTS`: `price-fakes`, every price API as a loopback fake); `<!-- example: timings -->`
  also normalises measured durations. Options combine with `;` (`<!-- example: env price-fakes;
  timings -->`).
- Each example runs in a fresh scratch folder that holds the repository's files (symlinks), with
  `venv/bin` first on PATH, through bash: commands may write files there (`sed ... > st/...`).
- Before comparing, both sides are normalised (`normalise`): clock times and dates (a span `T1 to
  T2` as one), loopback ports, EC2 instance ids and drill folder stamps become placeholders,
  trailing blanks go; with `timings`, every number with a unit of time does too.

A block that is not `console` but has `$ ` lines is refused (`misplaced`), so no example escapes.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
README: Final = REPO / "README.md"
ELLIPSIS: Final = "..."
#: the environments an example may ask for (`<!-- example: env NAME -->`); the test starts them
ENVIRONMENTS: Final = frozenset({"price-fakes"})
TIMEOUT_S: Final = 300.0

_FENCE = re.compile(r"^(`{3,})\s*([\w-]*)")
_DIRECTIVE = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
_PATTERNS: Final = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"), "<time>"),
    (re.compile(r"(?<![\d.:])\d{2}:\d{2}:\d{2}(?:\.\d+)?Z?(?![\d:])"), "<time>"),
    (re.compile(r"\b\d{8}-\d{6}\b"), "<stamp>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\bi-[0-9a-f]{17}\b"), "i-<id>"),
)
_TIMINGS: Final = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(\s?)(ms|s|min|h)\b")


@dataclass(frozen=True)
class Command:
    """One `$ ` command of an example: its README line, its text, and its expected output lines."""

    line: int
    text: str
    expected: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class Example:
    """One `console` block: where it is, its commands, and how it runs."""

    line: int
    commands: tuple[Command, ...]
    not_run: str | None = None
    env: str | None = None
    timings: bool = False

    @property
    def name(self) -> str:
        first = self.commands[0].text.split()[:4] if self.commands else []
        return f"README.md:{self.line}:" + "_".join(w.strip("-").replace("/", ".") for w in first)


class ConventionError(ValueError):
    """A block that breaks the convention; the message names its README line."""


def _directive(text: str, line: int) -> tuple[str | None, str | None, bool]:
    not_run = env = None
    timings = False
    head, sep, reason = text.partition("not run")
    if sep:  # the reason is the rest of the comment, whatever it holds
        not_run = reason.lstrip(": ").strip()
        if not not_run:
            raise ConventionError(f"README.md line {line}: `not run` needs its reason (not run: WHY)")
    for part in (p.strip() for p in head.split(";")):
        if not part:
            continue
        if part.startswith("env "):
            env = part.removeprefix("env ").strip()
            if env not in ENVIRONMENTS:
                known = ", ".join(sorted(ENVIRONMENTS))
                raise ConventionError(f"README.md line {line}: unknown environment {env!r} (known: {known})")
        elif part == "timings":
            timings = True
        else:
            raise ConventionError(f"README.md line {line}: unknown example option {part!r}")
    return not_run, env, timings


def _commands(body: Sequence[tuple[int, str]]) -> tuple[Command, ...]:
    out: list[Command] = []
    i = 0
    while i < len(body):
        line, text = body[i]
        if not text.startswith("$ "):
            raise ConventionError(f"README.md line {line}: output before the first `$ ` command")
        command, i = text[2:], i + 1
        while command.endswith("\\") and i < len(body):
            command = command[:-1].rstrip() + " " + body[i][1].strip()
            i += 1
        expected: list[tuple[int, str]] = []
        while i < len(body) and not body[i][1].startswith("$ "):
            expected.append(body[i])
            i += 1
        out.append(Command(line, command, tuple(expected)))
    return tuple(out)


def blocks(text: str) -> list[tuple[int, str, str, list[tuple[int, str]]]]:
    """Every fenced block: (fence line, info word, the line before it, its lines with their numbers)."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        ticks, info, start = fence.group(1), fence.group(2), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(ticks):
            body.append((i + 1, lines[i]))
            i += 1
        before = lines[start - 1] if start > 0 else ""
        out.append((start + 1, info, before, body))
        i += 1
    return out


def examples(text: str) -> list[Example]:
    """The README's examples (see the module docstring); ConventionError for a block that breaks it."""
    found = []
    for line, info, before, body in blocks(text):
        directive = _DIRECTIVE.match(before)
        if info != "console":
            if directive is not None:
                raise ConventionError(
                    f"README.md line {line}: an example directive before a non-console block"
                )
            continue
        not_run, env, timings = _directive(directive.group(1), line) if directive else (None, None, False)
        found.append(Example(line, _commands(body), not_run, env, timings))
    return found


def misplaced(text: str) -> list[str]:
    """Blocks that show `$ ` commands without being `console` blocks: they would escape the test."""
    return [
        f"README.md line {line}: a block with `$ ` commands must be a console block (run, or marked not run)"
        for line, info, _, body in blocks(text)
        if info != "console" and any(t.startswith("$ ") for _, t in body)
    ]


def normalise(text: str, *, timings: bool = False) -> str:
    """One line as compared: times, dates, ports, ids and stamps as placeholders, no trailing blanks."""
    for pattern, placeholder in _PATTERNS:
        text = pattern.sub(placeholder, text)
    text = text.replace("<time> to <time>", "<time>")  # a span read within one second or two
    if timings:
        text = _TIMINGS.sub(lambda m: f"<t>{m.group(1)}{m.group(2)}", text)
    return text.rstrip()


def difference(
    expected: Sequence[tuple[int, str]], actual: Sequence[str], *, timings: bool = False
) -> str | None:
    """None when `actual` matches `expected` (with `...` for any lines); else where and how it differs."""
    want = [(n, normalise(t, timings=timings)) for n, t in expected]
    while want and not want[-1][1]:
        want.pop()
    got = [normalise(t, timings=timings) for t in actual]
    while got and not got[-1]:
        got.pop()
    pos, skipping = 0, False
    for line, text in want:
        if text == ELLIPSIS:
            skipping = True
            continue
        if skipping:
            later = [k for k in range(pos, len(got)) if got[k] == text]
            if not later:
                return f"README line {line} is not in the output after output line {pos}:\n  README: {text!r}"
            pos, skipping = later[0] + 1, False
            continue
        if pos >= len(got):
            return f"the output ends before README line {line}:\n  README: {text!r}"
        if got[pos] != text:
            return (
                f"README line {line} differs from output line {pos + 1}:\n"
                f"  README: {text!r}\n  actual: {got[pos]!r}"
            )
        pos += 1
    if not skipping and pos < len(got):
        return (
            f"the output has more lines than the README shows, from output line {pos + 1}:\n"
            f"  actual: {got[pos]!r}"
        )
    return None


def scratch(folder: Path) -> Path:
    """A folder that holds the repository's files (as symlinks), where an example's commands run."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name != ".git" and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    return folder


def run(command: str, cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
    """Run one command as the README shows it (bash, the venv's python first); (exit code, output)."""
    full = {**os.environ, **env}
    full["PATH"] = f"{REPO / 'venv' / 'bin'}{os.pathsep}{full.get('PATH', '')}"
    full.pop("COLUMNS", None)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.returncode, done.stdout
