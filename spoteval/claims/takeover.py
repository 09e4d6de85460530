"""Taking over an ended holder's episodes, and what a node's own attempts may do once its lease ended.

Three ways a chunk's episodes move from an ended holder F to a node's holder T (all one `takeover`
entry, appended at the log's next free position, so of several takers exactly one wins):

- *checked* (F is another node's, or an earlier incarnation's that another node ended): before it
  writes the entry, T reads F's record of those episodes (`Check`): which have their result, which
  have a recorded final attempt but no result (F was lost between the two writes), which attempts F
  had in flight. The entry's `ranges` mark the settled ones started, so nobody steals them and T
  does not run them; once the entry is T's (`Settled.commit`), T writes the missing results from
  F's attempts and records F's lost attempts `interrupted`, and only then starts the rest. The
  taker is the one writer of those records: a second taker finds nothing left to take.
- *reclaimed* (F is this node's own holder: ended by this node's own restart, `replaced`, or by
  another node while this incarnation still ran, which fenced it): what F had started stays started,
  now T's (`adopted`), and this node's own attempts of them are recorded as they end, by itself.
- nobody's episodes (entry 0 unreadable) are taken over like a checked holder's.

A node's attempt of an episode counts only while the episode is its holder's (`standing`): OWN
(the holder owns the episode in the log, has started it, and its lease is valid: renewed less than
`expiry_s / 2` ago, so nobody can have ended it), WAIT (the lease is overdue, or a reclaim has not
yet been written), LOST (another node took the episode over: the attempt is given up, its taker
records it). The agent starts an attempt only while it is OWN and writes its record only while it
is OWN; an attempt written while OWN reaches the store at least `expiry_s / 2` before anyone can
end the lease, so every taker sees it (unless that one write takes longer than `expiry_s / 2` to
reach the store: the holder paused or cut off inside the request).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from spoteval.claims.io import StoreLike
from spoteval.record import RunLayout

OWN: Final = "own"
WAIT: Final = "wait"
LOST: Final = "lost"


@dataclass(frozen=True)
class Takeover:
    """Episodes of chunk `c` that `source` (an ended holder; None: nobody) owns without a known result."""

    c: int
    source: str | None
    offsets: tuple[int, ...]
    episodes: tuple[str, ...]
    read_back: bool = False  # our own entry, found in the log unchecked (its write's reply was lost)


def _nothing(moved: frozenset[str]) -> None:
    return None


@dataclass(frozen=True)
class Settled:
    """What a check found: episodes with their result in the store, episodes whose outcome is recorded
    (results included: not to run again), and what to write once the takeover entry is ours
    (`commit(moved)`, for the episodes the entry moved: the log may have changed while it checked)."""

    results: frozenset[str] = frozenset()
    final: frozenset[str] = frozenset()
    commit: Callable[[frozenset[str]], None] = field(default=_nothing)


Check = Callable[[Takeover], Settled]


def results_check(store: StoreLike, run_id: str) -> Check:
    """The plain check: an episode whose result exists is settled (for users of `Pool` without an
    agent; the agent's check also reads attempts, spoteval/agent/taken_over.py)."""
    layout = RunLayout(run_id)

    def check(takeover: Takeover) -> Settled:
        found = frozenset(e for e in takeover.episodes if store.exists(layout.result(e)))
        return Settled(results=found, final=found)

    return check
