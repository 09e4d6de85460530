"""What a pool did, from the run record (the report's `Pool` lines): each node's share and the work
done twice.

Duplicated work is episode time spent on attempts whose episode another node finished (the
result's node differs from the attempt's): the cost of a lost node's attempts run again, of a
fenced holder, or of a claim object that could not be read. Interrupted attempts on the node that
then finished the episode are not duplicated work (they are the price of the preemption itself).
Of the duplicated work, `interrupted_s` is the time of `interrupted` attempts: in flight on a node
when it was taken, lost, or its lease ended (recorded by the node itself at a notice, or by the
node that took its episodes over), then run again elsewhere. No design can save that work; the rest
of the duplicated work is attempts that ended (a failure retried elsewhere, or a completion beyond
one) on a node other than the result's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spoteval.record import Attempt


@dataclass
class NodeShare:
    attempts: int = 0
    completed: int = 0
    results: int = 0
    episode_s: float = 0.0
    duplicated_s: float = 0.0


@dataclass
class PoolFigures:
    nodes: dict[str, NodeShare] = field(default_factory=dict)
    episode_s: float = 0.0
    duplicated_s: float = 0.0
    interrupted_s: float = 0.0  # of duplicated_s: interrupted attempts (in flight when taken)
    beyond_one: int = 0  # completed attempts beyond one per episode with a result

    @property
    def duplicated_share(self) -> float:
        return self.duplicated_s / self.episode_s if self.episode_s > 0 else 0.0

    @property
    def beyond_interrupted_share(self) -> float:
        """Duplicated work beyond the interrupted attempts, as a share of all episode time."""
        return (self.duplicated_s - self.interrupted_s) / self.episode_s if self.episode_s > 0 else 0.0


def pool_figures(attempts: Iterable[Attempt], results: Mapping[str, Attempt]) -> PoolFigures:
    out = PoolFigures()
    completed: dict[str, int] = {}
    for a in attempts:
        share = out.nodes.setdefault(a.node, NodeShare())
        share.attempts += 1
        seconds = max(0.0, a.seconds)
        share.episode_s += seconds
        out.episode_s += seconds
        if a.outcome == "completed":
            share.completed += 1
            completed[a.episode_id] = completed.get(a.episode_id, 0) + 1
        result = results.get(a.episode_id)
        if result is not None and result.node != a.node:
            share.duplicated_s += seconds
            out.duplicated_s += seconds
            if a.outcome == "interrupted":
                out.interrupted_s += seconds
    for result in results.values():
        out.nodes.setdefault(result.node, NodeShare()).results += 1
    out.beyond_one = sum(n - 1 for e, n in completed.items() if e in results and n > 1)
    return out


def _names(figures: PoolFigures, alias: Mapping[str, str] | None) -> dict[str, str]:
    """Node names to show: the ids, or in a shared report the aliases (`node-N`) for every node."""
    if alias is None:
        return {node: node for node in figures.nodes}
    names = dict(alias)
    for node in sorted(figures.nodes):
        names.setdefault(node, f"node-{len(names) + 1}")
    return names


def to_json(figures: PoolFigures, alias: Mapping[str, str] | None = None) -> dict[str, object]:
    """The pool's figures for the report's JSON (`alias` renames nodes in a shared report)."""
    names = _names(figures, alias)
    return {
        "nodes": {
            names.get(node, node): {
                "attempts": s.attempts,
                "completed": s.completed,
                "results": s.results,
                "episode_s": round(s.episode_s, 3),
                "duplicated_s": round(s.duplicated_s, 3),
            }
            for node, s in sorted(figures.nodes.items())
        },
        "episode_s": round(figures.episode_s, 3),
        "duplicated_s": round(figures.duplicated_s, 3),
        "duplicated_share": round(figures.duplicated_share, 6),
        "interrupted_s": round(figures.interrupted_s, 3),
        "completed_beyond_one": figures.beyond_one,
    }


def render(figures: PoolFigures, alias: Mapping[str, str] | None = None) -> list[str]:
    """Text lines: one per node, then the duplicated work."""
    names = _names(figures, alias)
    lines = [f"{'node':<24} {'results':>8} {'attempts':>9} {'episode time':>13} {'duplicated':>11}"]
    for node, s in sorted(figures.nodes.items()):
        lines.append(
            f"{names.get(node, node)[:24]:<24} {s.results:>8} {s.attempts:>9} "
            f"{s.episode_s:>12.1f}s {s.duplicated_s:>10.1f}s"
        )
    lines.append(
        f"duplicated work: {figures.duplicated_s:.1f} s of {figures.episode_s:.1f} s episode time "
        f"({100 * figures.duplicated_share:.2f} %; of it interrupted, in flight when taken: "
        f"{figures.interrupted_s:.1f} s); "
        f"completed attempts beyond one per episode: {figures.beyond_one}"
    )
    return lines
