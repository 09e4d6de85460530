"""The user's own eval harness on spot capacity: inspect-ai and lm-evaluation-harness.

    HARNESSES["inspect"]   spoteval/harness/inspect_harness.py
    HARNESSES["lm-eval"]   spoteval/harness/lm_eval_harness.py

The user names the harness, the task, its arguments and options; spot-eval splits the task's samples
into shards (spoteval/harness/shards.py), one episode each, and every episode runs
`python -m spoteval.harness run ...` (spoteval/harness/runner.py) on the node: it points the
harness at the model server, streams each finished sample to the run record's store
(spoteval/harness/progress.py), resumes from there, and decides the outcome from the harness's own
log. Importing this package does not import either harness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from spoteval.harness.base import Harness, HarnessError
from spoteval.harness.inspect_harness import InspectHarness
from spoteval.harness.lm_eval_harness import LmEvalHarness

HARNESSES: Final[Mapping[str, Harness]] = {"inspect": InspectHarness(), "lm-eval": LmEvalHarness()}
#: what each harness needs installed: (the module it imports, the requirement that brings it)
PACKAGES: Final[Mapping[str, tuple[str, str]]] = {
    "inspect": ("inspect_ai", "inspect-ai>=0.3.285"),
    "lm-eval": ("lm_eval", "lm-eval[api]>=0.4.13"),
}


def requirement_name(line: str) -> str | None:
    """The normalised project name a requirement line installs (`Inspect_AI==0.3` -> `inspect-ai`)."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    if match is None or line.lstrip().startswith(("-", "#")):
        return None
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def names_harness(harness: str, lines: Sequence[str]) -> bool:
    """Whether requirement lines install the harness itself."""
    wanted = requirement_name(PACKAGES[harness][1])
    return any(requirement_name(line) == wanted for line in lines)


def get(name: str) -> Harness:
    """The harness of that name; HarnessError (one line naming the known ones) otherwise."""
    harness = HARNESSES.get(name)
    if harness is None:
        raise HarnessError(f"unknown harness {name!r} (known: {', '.join(sorted(HARNESSES))})")
    return harness


__all__ = ["HARNESSES", "PACKAGES", "Harness", "HarnessError", "get", "names_harness", "requirement_name"]
