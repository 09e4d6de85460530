"""The placement decision for people: the text report, and the plot of expected cost against tau."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from spoteval import figures
from spoteval.figures import sig
from spoteval.placement.closed_form import closed_form, hours, money
from spoteval.placement.decision import SimulationInputs
from spoteval.placement.model import Placement
from spoteval.placement.simulate import Simulation
from spoteval.placement.workload import OPTIONS, PlacementError, Workload

Lines = list[tuple[str, str]]


def _pct(x: float) -> str:
    return f"{x:.1%}"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligned plain-text columns: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(wd) if i < left else c.rjust(wd)
            for i, (c, wd) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "   ".join(parts).rstrip()

    return [line(headers), "  " + "-" * (sum(widths) + 3 * (len(widths) - 1)), *(line(r) for r in rows)]


def _lifetime(w: Workload, bound: str | None) -> str:
    interval = (
        f", interval [{hours(w.lifetime_interval_hours[0])}, {hours(w.lifetime_interval_hours[1])}]"
        if w.lifetime_interval_hours
        else ""
    )
    if bound is not None:
        return f"tau >= {hours(w.lifetime_hours)} (a lower bound: {bound}){interval}"
    return f"tau = {hours(w.lifetime_hours)} (mean time from start to preemption){interval}"


def input_lines(w: Workload, labels: Mapping[str, str]) -> Lines:
    """The Inputs section: every number the decision used, each row with where it came from when
    that is not the workload's source (`labels`: row -> where; `lifetime bound`: why tau is a bound)."""
    if w.episode_samples_hours:
        length = f"D = mean of {len(w.episode_samples_hours)} samples = {hours(w.episode_hours)}"
    else:
        length = f"D = {hours(w.episode_hours)}"
    grant = [
        f"{k} {money(v)}"
        for k, v in (("price_cap", w.grant.price_cap), ("budget", w.grant.budget))
        if v is not None
    ]
    nodes = (
        f"k = {w.nodes} sharing one queue, each preempted and booted on its own: n/k = {sig(w.node_rounds)}"
    )
    items = [
        ("episodes", f"N = {w.episodes} of {length}, C = {w.concurrency} at a time"),
        ("rounds", f"n = N/C = {sig(w.rounds)}"),
        *([("nodes", nodes)] if w.nodes > 1 else []),
        ("lifetime", _lifetime(w, labels.get("lifetime bound"))),
        ("restart", f"wait W = {hours(w.wait_hours)} (not billed), boot B = {hours(w.boot_hours)} (billed)"),
        ("prices", ", ".join(f"{k} {money(v)}" for k, v in w.prices.to_json().items()) + " per node-hour"),
        (
            "deadline",
            f"{hours(w.deadline_hours)}, met with probability >= {w.deadline_confidence:g}"
            if w.deadline_hours is not None
            else "none",
        ),
        ("spot margin", f"{w.spot_margin:.0%} (spot must cost this much less than the next option)"),
        ("grant", ", ".join(grant) if grant else "no price cap, no budget"),
    ]
    lines: Lines = [("bold", "Inputs")]
    for label, text in items:
        where = labels.get(label)
        lines.append(("", f"  {label:<12} {text}" + (f"  [{where}]" if where else "")))
    lines += [("", f"  left out    {name}: {why}") for name, why in w.left_out]
    return lines


def option_lines(placement: Placement, simulation: Simulation) -> Lines:
    """The Options section: each option's closed form (spot's, under a deadline policy that switches,
    its simulated means), its deadline chance and eligibility."""
    spot_policy = placement.options["spot"].policy
    switching = spot_policy not in (None, "spot")
    how = f"spot with {spot_policy}: its simulated means" if switching else "spot's p_deadline"
    lines: Lines = [("bold", f"Options (closed form; {how} from {simulation.runs} simulated runs)")]
    rows = [
        [
            f"{name} ({o.policy})" if name == "spot" and switching else name,
            figures.money(o.expected_cost, zeros=True),
            sig(o.billed_hours, zeros=True),
            sig(o.wall_hours, zeros=True),
            _pct(o.efficiency),
            "-" if o.p_deadline is None else f"{o.p_deadline:.2f}",
            "left out" if placement.workload.why_left_out(name) else "yes" if o.eligible else "no",
        ]
        for name, o in placement.options.items()
    ]
    headers = ["option", "expected cost", "billed h", "wall h", "efficiency", "p_deadline", "eligible"]
    return lines + [("", text) for text in text_table(headers, rows)]


def simulated_lines(simulation: Simulation, inputs: SimulationInputs) -> Lines:
    """The Simulated section: each strategy's cost and wall-time spread, and the trace's tau."""
    lines: Lines = [
        ("bold", f"Simulated ({simulation.runs} runs, seed {simulation.seed}, {simulation.engine} engine)")
    ]
    if simulation.engine == "ticks":
        lines.append(("", f"  spot capacity {simulation.ticks}; boots {simulation.boots}"))
    else:
        lines.append(
            ("", f"  lifetimes {simulation.lifetimes}; waits {simulation.waits}; boots {simulation.boots}")
        )
        if simulation.ticks and "uniform_progress" in simulation.strategies:
            lines.append(("", f"  uniform_progress decides at ticks: {simulation.ticks}"))
    rows = [
        [
            name,
            figures.money(s.mean_cost, zeros=True),
            "-".join(figures.money(s.cost_quantiles[i], zeros=True) for i in (0, 2)),
            sig(s.mean_wall_hours, zeros=True),
            sig(s.wall_quantiles[2], zeros=True),
            "-" if s.p_deadline is None else f"{s.p_deadline:.2f}",
            f"{s.mean_preemptions:.1f}",
            "-" if s.switched is None else f"{s.switched:.0%}",
            sig(s.spot_work_hours, zeros=True),
        ]
        for name, s in simulation.strategies.items()
    ]
    headers = [
        "strategy",
        "mean cost",
        "cost p05-p95",
        "mean wall h",
        "wall p95 h",
        "p_deadline",
        "preemptions",
        "switched",
        "spot work h",
    ]
    lines += [("", text) for text in text_table(headers, rows)]
    lines += [("", f"  not simulated: {name}: {why}") for name, why in simulation.skipped.items()]
    if inputs.trace is not None:
        t = inputs.trace
        tau = "none (no preemption)" if t.tau_hours is None else f"{t.tau_hours:.3g} h"
        high = f"{t.interval_hours[1]:.3g}" if math.isfinite(t.interval_hours[1]) else "inf"
        cv = "-" if t.cv is None else f"{t.cv:.2f}"
        lines.append(("", f"  trace {inputs.trace_source} ({inputs.trace_kind} trace):"))
        lines.append(
            (
                "",
                f"    tau {tau}, {t.confidence:.0%} interval [{t.interval_hours[0]:.3g}, {high}] h, "
                f"{t.preemptions} preemptions in {t.total_hours:.1f} h, coefficient of variation {cv}",
            )
        )
    return lines


def break_even_lines(placement: Placement) -> Lines:
    """The Break-even section: how far tau and the price ratio are from flipping the decision."""
    w, be = placement.workload, placement.break_even
    lines: Lines = [("bold", "Break-even (everything else fixed)"), ("", f"  tau: {be.note}")]
    if be.price_ratio is not None and be.against is not None:
        now = (w.prices.of(be.against) or 0.0) / w.prices.spot if w.prices.spot > 0 else math.inf
        lines.append(
            (
                "",
                f"  price ratio: spot wins on cost while {be.against}'s price / spot's price > "
                f"{be.price_ratio:.3g} (now {now:.3g})",
            )
        )
    else:
        lines.append(("", "  price ratio: none (no eligible option to compare spot's price with)"))
    if be.nodes_for_deadline is not None and w.deadline_hours is not None:
        lines.append(
            (
                "",
                f"  nodes: {be.nodes_for_deadline} spot node(s) meet the {hours(w.deadline_hours)} deadline "
                "(closed form)",
            )
        )
    return lines


def report_lines(
    placement: Placement,
    simulation: Simulation,
    inputs: SimulationInputs,
    warnings: Sequence[str],
    source: str,
    *,
    labels: Mapping[str, str] | None = None,
) -> Lines:
    """The report as (style, text) lines; style is "" for plain text or a rich style for headings."""
    lines: Lines = [("bold", f"spot-eval placement: {source}"), ("", "")]
    for section in (
        input_lines(placement.workload, labels or {}),
        option_lines(placement, simulation),
        simulated_lines(simulation, inputs),
        break_even_lines(placement),
    ):
        lines += [*section, ("", "")]
    if warnings:
        lines.append(("bold yellow", "Warnings"))
        lines += [("", f"  ! {text}") for text in warnings]
        lines.append(("", ""))
    lines.append(
        ("bold green" if placement.decision != "none" else "bold red", f"Decision: {placement.decision}")
    )
    lines += [("", f"  - {reason}") for reason in placement.reasons]
    return lines


def render_report(
    placement: Placement,
    simulation: Simulation,
    inputs: SimulationInputs,
    warnings: Sequence[str],
    source: str,
    *,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Print the readable report: headings styled on a terminal, plain text when piped."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    for style, text in report_lines(placement, simulation, inputs, warnings, source, labels=labels):
        console.print(text, style=style or None, markup=False)


def plot(path: Path, placement: Placement, inputs: SimulationInputs) -> None:
    """Expected cost of every option against tau (log axes), with break-even and tau marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    w = placement.workload
    be = placement.break_even.tau_hours
    marks = [w.lifetime_hours] + ([be] if be is not None else [])
    low = max(min(marks) / 30, 1e-3)
    high = min(max(marks) * 30, 1e6)
    steps = 200
    taus = [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]
    curves = {name: [closed_form(w, tau=t)[name].expected_cost for t in taus] for name in placement.options}

    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    styles = {"spot": "-", "on_demand": "--", "non_preemptible": "-."}
    for name in OPTIONS:
        if name in curves:
            ys = [y if math.isfinite(y) else float("nan") for y in curves[name]]
            ax.plot(taus, ys, styles[name], label=f"{name}")
    threshold = placement.break_even.threshold
    if threshold is not None:
        label = (
            f"(1 - {w.spot_margin:g}) x {placement.break_even.against}"
            if placement.break_even.against is not None and threshold != w.grant.budget
            else "budget"
        )
        ax.axhline(threshold, color="grey", lw=0.8, ls=":", label=f"spot must cost less: {label}")
    if be is not None:
        ax.axvline(be, color="red", lw=1, label=f"break-even tau {be:.3g} h")
    ax.axvline(w.lifetime_hours, color="black", lw=1, label=f"workload tau {w.lifetime_hours:g} h")
    if w.lifetime_interval_hours is not None:
        ax.axvspan(*w.lifetime_interval_hours, color="black", alpha=0.1, label="tau interval")
    if inputs.trace is not None and inputs.trace.tau_hours is not None:
        lo, hi = inputs.trace.interval_hours
        ax.axvspan(
            lo, hi if math.isfinite(hi) else high, color="tab:purple", alpha=0.12, label="trace tau interval"
        )
        ax.axvline(
            inputs.trace.tau_hours,
            color="tab:purple",
            lw=1,
            ls="--",
            label=f"trace tau {inputs.trace.tau_hours:.3g} h",
        )
    finite = [y for ys in curves.values() for y in ys if math.isfinite(y)]
    steady = [o.expected_cost for n, o in placement.options.items() if n != "spot"] or [
        placement.options["spot"].expected_cost
    ]
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_ylim(min(finite) * 0.8, max(*steady, placement.options["spot"].expected_cost) * 10)
    ax.set_xlim(low, high)
    ax.set_xlabel("mean allocation lifetime tau (hours)")
    ax.set_ylabel("expected cost")
    ax.set_title(
        f"Expected cost against tau (N={w.episodes}, D={w.episode_hours * 60:g} min, C={w.concurrency})"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise PlacementError("--plot", f"cannot write {path}: {err.strerror or err}") from None
