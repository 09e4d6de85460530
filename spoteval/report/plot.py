"""The timeline plot of a run (`plot_timeline`): one row per node above the count of episodes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from spoteval.report.analysis import RunReport
from spoteval.report.as_json import origin_of
from spoteval.report.redact import _aliases

#: the colours of a node's row
COLORS: Final = {
    "waiting": "#d9d9d9",
    "booting": "#f4a259",
    "serving": "#5b8e7d",
    "notice": "#f2d57e",
    "measurement": "#8da9c4",
}

_Seconds = Callable[[datetime], float]


def plot_timeline(report: RunReport, path: str, *, shared: bool = False) -> None:
    """A timeline per node (waiting for capacity, booting, serving; notices and preemptions marked)
    above the count of episodes completed over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = origin_of(report)
    alias = _aliases(report)
    nodes = list(alias)

    def x(t: datetime) -> float:
        return (t - origin).total_seconds()

    fig, (ax, bx) = plt.subplots(
        2,
        1,
        figsize=(11, 2.2 + 0.6 * max(1, len(nodes)) + 2.4),
        sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(nodes)) * 0.6 + 0.6, 2.4]},
    )
    for i, node in enumerate(nodes):
        _node_row(ax, report, node, len(nodes) - 1 - i, x)
    ax.set_yticks(range(len(nodes)))
    ax.set_yticklabels([alias[n] if shared else n for n in reversed(nodes)])
    ax.set_ylim(-0.8, len(nodes) - 0.2)
    _legend(ax, report, len(nodes))
    ax.set_title("Allocations per node", loc="left", fontsize=10, pad=38)
    _episodes_panel(bx, report, x)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the allocations panel: a row per node ------------------------------------------------------


def _node_row(ax: Any, report: RunReport, node: str, y: int, x: _Seconds) -> None:
    """Node `node`'s row at height `y`: its gaps, then each allocation's phases and how it ended."""
    for g in report.gaps:
        if g.node == node:
            color = COLORS["waiting"] if g.kind == "capacity" else "#f0f0f0"
            ax.broken_barh(
                [(x(g.begin), g.seconds)],
                (y - 0.3, 0.6),
                color=color,
                hatch="//" if g.kind == "capacity" else None,
                edgecolor="#b0b0b0",
                linewidth=0,
            )
    for a in report.allocations:
        if a.node != node:
            continue
        boot_end = a.first_dispatch or a.ready or a.end
        boot_end = min(max(boot_end, a.start), a.end)
        if a.kind == "measurement":
            ax.broken_barh([(x(a.start), a.seconds)], (y - 0.3, 0.6), color=COLORS["measurement"])
            continue
        ax.broken_barh(
            [(x(a.start), (boot_end - a.start).total_seconds())], (y - 0.3, 0.6), color=COLORS["booting"]
        )
        serve_end = min(max(a.notice or a.end, boot_end), a.end)
        ax.broken_barh(
            [(x(boot_end), (serve_end - boot_end).total_seconds())],
            (y - 0.3, 0.6),
            color=COLORS["serving"],
        )
        if serve_end < a.end:
            ax.broken_barh(
                [(x(serve_end), (a.end - serve_end).total_seconds())],
                (y - 0.3, 0.6),
                color=COLORS["notice"],
            )
        if a.notice is not None:
            ax.plot([x(a.notice)], [y + 0.42], marker="v", color="#e0a800", markersize=8, linestyle="none")
        if a.ended_by in ("preempted", "notice"):
            ax.plot([x(a.end)], [y], marker="x", color="#c0392b", markersize=9, mew=2, linestyle="none")
        elif a.ended_by == "lost":
            ax.plot([x(a.end)], [y], marker="X", color="#7b241c", markersize=9, linestyle="none")
        elif a.ended_by == "stop":
            ax.plot([x(a.end)], [y], marker="s", color="black", markersize=6, linestyle="none")


def _legend(ax: Any, report: RunReport, node_count: int) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=COLORS["waiting"], label="waiting for capacity"),
        Patch(color=COLORS["booting"], label="booting (start -> first episode)"),
        Patch(color=COLORS["serving"], label="serving episodes"),
        Patch(color=COLORS["notice"], label="notice -> end (no new episodes)"),
        Line2D([], [], marker="v", color="#e0a800", linestyle="none", label="notice"),
        Line2D([], [], marker="x", color="#c0392b", mew=2, linestyle="none", label="preempted"),
        Line2D([], [], marker="X", color="#7b241c", linestyle="none", label="lost without notice"),
        Line2D([], [], marker="s", color="black", linestyle="none", label="stopped"),
    ]
    if any(a.kind == "measurement" for a in report.allocations):
        handles.append(Patch(color=COLORS["measurement"], label="restart measurement"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1.0 + 0.9 / (node_count + 1.5)),
        ncol=4,
        fontsize=8,
        frameon=False,
    )


# --- the episodes panel -------------------------------------------------------------------------


def _episodes_panel(bx: Any, report: RunReport, x: _Seconds) -> None:
    """The running counts of completed episodes, final model failures and interrupted attempts."""
    done = sorted(r.ended for r in report.record.results.values() if r.outcome == "completed")
    failed = sorted(r.ended for r in report.record.results.values() if r.outcome == "model_failure")
    interrupted = sorted(a.ended for a in report.record.attempts if a.outcome == "interrupted")
    series = (
        (done, "#5b8e7d", "completed"),
        (failed, "#c0392b", "final model failures"),
        (interrupted, "#e0a800", "interrupted attempts"),
    )
    for times, color, label in series:
        if times:
            bx.step([x(t) for t in times], range(1, len(times) + 1), where="post", color=color, label=label)
    bx.set_ylabel("episodes")
    bx.set_xlabel("seconds since the first start")
    bx.legend(loc="upper left", fontsize=8, frameon=False)
    bx.grid(alpha=0.3)
