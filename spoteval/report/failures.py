"""Episodes whose final result is a harness error: how many, why, and whether that is every one.

A harness error is not the model's (a missing harness, a task that does not load, an unknown
sample, a failed requirements install): it is never scored, and a run whose every episode ended
that way has measured nothing. The report prints the first reasons (one line each: the shard
runner's last line, or the installer's), and the drill exits 3 with the first one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.record import Attempt

SHOWN: Final = 3
INSTALL: Final = "requirements install failed"


def reason(error: str | None) -> str:
    """One line for an attempt's error: the last line the episode wrote, with what failed first."""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    if not lines:
        return "no reason recorded"
    if lines[0].startswith(INSTALL) and len(lines) > 1:
        return f"{lines[0].rstrip(':')}: {lines[-1]}"
    last = lines[-1]
    for prefix in ("exited with 3: ", "exited with 2: "):
        last = last.removeprefix(prefix)
    return last


@dataclass(frozen=True)
class HarnessFailures:
    count: int
    results: int
    episodes: int | None  # in the manifest, when known
    first: tuple[tuple[str, str], ...]  # (episode, reason), the first SHOWN

    @property
    def every_episode(self) -> bool:
        """Every episode of the run has a result, and each is a harness error."""
        total = self.episodes if self.episodes is not None else self.results
        return self.count > 0 and self.count == self.results == total

    def line(self) -> str:
        of = f"{self.count} of {self.episodes if self.episodes is not None else self.results}"
        return f"Harness errors: {of} episodes failed for reasons that are not the model's"


def harness_failures(results: Mapping[str, Attempt], episodes: int | None) -> HarnessFailures:
    failed = sorted(e for e, r in results.items() if r.outcome == "harness_error")
    first = tuple((e, reason(results[e].error)) for e in failed[:SHOWN])
    return HarnessFailures(len(failed), len(results), episodes, first)
