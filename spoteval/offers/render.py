"""The ranking for reading: a text table of offers, the reasons offers are not eligible, and a plot
of expected cost against wall time per offer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from spoteval.figures import sig
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
    "tau h",
    "exp. cost",
    "per episode",
    "wall h",
    "p_deadline",
)
_TAU_MARK = {"run": "run", "trace": "trace", "workload": "wl*"}


def _row(r: RankedOffer) -> list[str]:
    o, p, w, opt, ev = r.offer, r.price, r.workload, r.option, r.evidence
    price = f"{sig(p.per_hour)} {p.currency}" if p else "-"
    kind = f"{'history' if p.kind == 'spot_history' else p.kind}/{p.zone or p.scope}" if p else "-"
    tau = "-"
    if ev is not None and o.market == "spot":
        tau = f"{sig(ev.lifetime_hours)} {_TAU_MARK.get(ev.tau_source, ev.tau_source)}"
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
        tau,
        money(opt.expected_cost) if opt else "-",
        sig(per_episode) if per_episode is not None and math.isfinite(per_episode) else "-",
        sig(opt.wall_hours, zeros=True) if opt and math.isfinite(opt.wall_hours) else "-",
        "-" if opt is None or opt.p_deadline is None else f"{opt.p_deadline:.2f}",
    ]


def _read_times(ranking: Ranking) -> str:
    """When each provider's prices were read (UTC), from first to last."""
    times: dict[str, list[str]] = {}
    for r in ranking.offers:
        if r.price is not None:
            times.setdefault(r.offer.provider, []).append(r.price.read_at.strftime("%Y-%m-%d %H:%M:%SZ"))
    parts = []
    for provider, stamps in times.items():
        first, last = min(stamps), max(stamps)
        parts.append(f"{provider} {first}" + (f" to {last[11:]}" if last != first else ""))
    return ", ".join(parts) or "none"


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
        "  price is: the newest entry of a spot price history (per zone) or the current list price "
        "(per region, or global)."
    )
    out.append(f"  prices read: {_read_times(ranking)}.")
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
    if ranking.priced == 0:
        out.append(
            "Answer: nothing could be priced: no offer's price could be read (the reasons are above), so "
            "nothing was compared with the grant."
        )
    elif best is None or best.option is None:
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
    from matplotlib.ticker import FuncFormatter

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
    providers = list(dict.fromkeys(r.offer.provider for r in points))
    colours = {p: f"C{i}" for i, p in enumerate(providers)}
    for r in points:
        assert r.option is not None
        x, y = r.option.wall_hours, r.option.expected_cost
        colour = colours[r.offer.provider]
        face = colour if r.eligible else "none"
        ax.scatter([x], [y], marker=markers[r.offer.market], facecolors=face, edgecolors=colour, s=50)
        if r.rank is not None:
            ax.annotate(f"#{r.rank}", (x, y), textcoords="offset points", xytext=(5, 3), fontsize=7)
    for provider, colour in colours.items():
        ax.scatter([], [], marker="o", facecolors=colour, edgecolors=colour, label=provider)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="grey", label="spot (hollow: not eligible)")
    ax.scatter([], [], marker="s", facecolors="none", edgecolors="grey", label="on-demand")
    workloads = [r.workload for r in points if r.workload is not None]
    deadlines = {w.deadline_hours for w in workloads if w.deadline_hours is not None}
    if len(deadlines) == 1:
        deadline = deadlines.pop()
        ax.axvline(deadline, color="red", lw=0.8, ls="--", label=f"deadline {deadline:g} h")
    budgets = {r.candidate.grant.budget for r in points if r.candidate.grant.budget is not None}
    if len(budgets) == 1:
        ax.axhline(budgets.pop(), color="grey", lw=0.8, ls=":", label="grant budget")
    if points:
        ax.set_xscale("log")
        ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.set_xlabel("expected wall time (hours)")
    ax.set_ylabel("expected cost")
    ax.set_title("Offers: expected cost against wall time (#: rank among the eligible)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise PlacementError("--plot", f"cannot write {path}: {err.strerror or err}") from None
