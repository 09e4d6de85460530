""".gitignore-style patterns: which files of an eval project stay home.

The rules are git's (gitignore(5)): blank lines and `#` comments are skipped; `!` re-includes; a
trailing `/` matches folders only; a pattern with a `/` elsewhere is anchored to the folder of the
file that holds it, one without matches a name at any depth; `*` and `?` do not cross `/`; `[...]`
is a class; `**/` is any number of folders, `/**` everything inside. The last matching pattern
wins, patterns of a deeper `.gitignore` after those of the folders above it, and a file inside an
ignored folder stays ignored (git does not look inside it, and neither does the bundle).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

#: Never shipped, whatever the project says: version control, caches, local environments.
DEFAULT_EXCLUDES: Final = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.py[cod]",
    ".venv/",
    "venv/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    ".DS_Store",
)


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    base: str  # the folder (relative to the project, "" for its root) the pattern is relative to

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1 :]
        return self.regex.fullmatch(rel) is not None


def _segment(seg: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "\\" and i + 1 < len(seg):
            out.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = seg.find("]", i + 2 if seg[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = seg[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_pattern(line: str, base: str = "") -> Rule | None:
    """One line of a .gitignore (relative to the folder `base`), or None for a blank or a comment."""
    text = line.rstrip("\n")
    if not text.strip() or text.startswith("#"):
        return None
    while text.endswith(" ") and not text.endswith("\\ "):
        text = text[:-1]
    negate = text.startswith("!")
    if negate or text.startswith("\\!") or text.startswith("\\#"):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    text = text.lstrip("/")
    segments = text.split("/")
    parts: list[str] = []
    for n, seg in enumerate(segments):
        last = n == len(segments) - 1
        if seg == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
        else:
            parts.append(_segment(seg) + ("" if last else "/"))
    regex = "".join(parts)
    if not anchored:
        regex = "(?:.*/)?" + regex
    return Rule(re.compile(regex, re.DOTALL), negate, dir_only, base)


def compile_lines(lines: Iterable[str], base: str = "") -> list[Rule]:
    return [r for r in (compile_pattern(line, base) for line in lines) if r is not None]


def ignored(rules: Sequence[Rule], rel: str, is_dir: bool) -> bool:
    """Whether the last rule that matches `rel` (a path relative to the project) excludes it."""
    verdict = False
    for rule in rules:
        if rule.matches(rel, is_dir):
            verdict = not rule.negate
    return verdict
