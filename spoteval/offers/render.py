"""The ranking for reading: a text table of offers, the reasons offers are not eligible, and a plot
of expected cost against wall time per offer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from spoteval.offers.rank import RankedOffer, Ranking
from spoteval.placement import PlacementError, hours, money

HEADERS = (
    "#",
    "provider",
    "region",
    "instance type",
    "market",
    "GPUs",
    "C",
    "price/h",
    "price is",
    "read",
    "tau h",
    "exp. cost",
    "per episode",
    "wall h",
    "p_deadline",
)
_TAU_MARK = {"run": "run", "trace": "trace", "workload": "wl*"}


def _row(r: RankedOffer) -> list[str]:
    o, p, w, opt, ev = r.offer, r.price, r.workload, r.option, r.evidence
    price = f"{p.per_hour:.5g} {p.currency}" if p else "-"
    kind = f"{'history' if p.kind == 'spot_history' else p.kind}/{p.zone or p.scope}" if p else "-"
    read = p.read_at.strftime("%H:%M:%SZ") if p else "-"
    tau = "-"
    if ev is not None and o.market == "spot":
        tau = f"{ev.lifetime_hours:.3g} {_TAU_MARK.get(ev.tau_source, ev.tau_source)}"
    per_episode = r.cost_per_episode
    return [
        str(r.rank) if r.rank is not None else "-",
        o.provider,
        o.region,
        o.instance_type,
        o.market,
        "?" if o.gpus is None else str(o.gpus),
        str(w.concurrency) if w else "-",
        price,
        kind,
        read,
        tau,
        money(opt.expected_cost) if opt else "-",
        f"{per_episode:.3g}" if per_episode is not None and math.isfinite(per_episode) else "-",
        f"{opt.wall_hours:.2f}" if opt and math.isfinite(opt.wall_hours) else "-",
        "-" if opt is None or opt.p_deadline is None else f"{opt.p_deadline:.2f}",
    ]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """Aligned columns: the first `left` (after the rank) left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(wd) if 0 < i <= left else c.rjust(wd)
            for i, (c, wd) in enumerate(zip(cells, widths, strict=True))
        ]
        return ("  " + "  ".join(parts)).rstrip()

    return [line(headers), "  " + "-" * (sum(widths) + 2 * (len(widths) - 1)), *(line(r) for r in rows)]


def text_lines(ranking: Ranking, source: str) -> list[str]:
    """The ranking as plain text: the table, the reasons, the sources of tau and S, the answer."""
    out = [f"spot-eval offers: {source}", ""]
    out += table(HEADERS, [_row(r) for r in ranking.offers], left=4)
    out.append("")
    out.append(
        "  price is: spot price history (newest entry, per zone) or the current list price, per zone, "
        "region or global; read: when it was read (UTC)."
    )
    out.append(
        "  tau h: from the run record (run), a trace (trace), or the workload (wl*: nothing was "
        "measured for this offer)."
    )
    out.append(
        "  C: episodes in flight on one node; exp. cost and wall h: the closed form; p_deadline: simulated."
    )
    blocked = [r for r in ranking.offers if not r.eligible]
    if blocked:
        out += ["", "Not eligible"]
        out += [f"  - {r.offer.name}: {r.why_not}" for r in blocked]
    notes = [(r, w) for r in ranking.offers for w in r.warnings]
    if notes:
        out += ["", "Warnings"]
        out += [f"  ! {r.offer.name}: {w}" for r, w in notes]
    out.append("")
    best = ranking.best
    if best is None or best.option is None:
        out.append(
            "Answer: none: no offer is eligible, so there is nowhere to run this workload within the grant."
        )
    else:
        o, opt = best.offer, best.option
        out.append(
            f"Answer: {o.name} ({best.candidate.stack or 'no stack'}): expected cost "
            f"{money(opt.expected_cost)} {best.price.currency if best.price else ''}, "
            f"{hours(opt.wall_hours)} of wall time"
            + (f", deadline met with probability {opt.p_deadline:.2f}" if opt.p_deadline is not None else "")
            + "."
        )
    return out


def plot(path: Path, ranking: Ranking) -> None:
    """Expected cost against expected wall time, one point per offer with figures (log axes)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [
        r
        for r in ranking.offers
        if r.option is not None
        and math.isfinite(r.option.expected_cost)
        and math.isfinite(r.option.wall_hours)
    ]
    fig = Figure(figsize=(9, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    markers = {"spot": "o", "on_demand": "s"}
    for r in points:
        assert r.option is not None
        x, y = r.option.wall_hours, r.option.expected_cost
        face = "tab:blue" if r.eligible else "none"
        ax.scatter([x], [y], marker=markers[r.offer.market], facecolors=face, edgecolors="tab:blue", s=50)
        rank = f"#{r.rank} " if r.rank else ""
        label = f"{rank}{r.offer.provider} {r.offer.instance_type} {r.offer.market}"
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    workloads = [r.workload for r in points if r.workload is not None]
    deadline = workloads[0].deadline_hours if workloads else None
    if deadline is not None:
        ax.axvline(deadline, color="red", lw=0.8, ls="--", label=f"deadline {deadline:g} h")
    budgets = {r.candidate.grant.budget for r in points if r.candidate.grant.budget is not None}
    if len(budgets) == 1:
        ax.axhline(budgets.pop(), color="grey", lw=0.8, ls=":", label="grant budget")
    ax.scatter([], [], marker="o", facecolors="tab:blue", edgecolors="tab:blue", label="spot, eligible")
    ax.scatter([], [], marker="s", facecolors="none", edgecolors="tab:blue", label="on-demand, not eligible")
    if points:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("expected wall time (hours)")
    ax.set_ylabel("expected cost")
    ax.set_title("Offers: expected cost against wall time (filled: eligible)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise PlacementError("--plot", f"cannot write {path}: {err.strerror or err}") from None
