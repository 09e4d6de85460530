"""Where to run an evaluation: spot, on-demand, or a non-preemptible box, and why.

    python -m scripts.placement [WORKLOAD.yaml] [--stack NAME] [--stacks-dir DIR] [--json]
                                [--plot FILE.png] [--trace FILE] [--runs N] [--seed S]
                                [--waits {fixed,exponential,trace}]

The workload comes from a YAML file, from the `spot-eval:workload` block of
`stacks/Pulumi.NAME.yaml` (`--stack NAME`), or, with neither, from the built-in example. The
closed form of `spoteval.placement` gives each option's expected cost, wall time and efficiency; a
Monte-Carlo of the same workload (`spoteval.simulate`, 2000 runs by default) gives spot's
probability of meeting the deadline and the cost spread of every strategy. `--trace` replays the
lifetimes and capacity waits of a spot trace in the simulation and estimates tau from it.

Exit codes: 0 a decision was made, 3 the decision is `none` (no option is eligible), 2 bad input
(one line on stderr: `error: <key or file>: <problem>`).

Extension point: `INPUT_HOOKS` refine the raw workload before it is parsed (for example, numbers
measured in a run record replacing the configured ones); each hook adds its own options.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scripts.report import FromRun
from spoteval.lifetime import LifetimeEstimate, read_trace
from spoteval.placement import (
    EXAMPLE_WORKLOAD,
    OPTIONS,
    Placement,
    PlacementError,
    Workload,
    closed_form,
    money,
    parse_workload,
    place,
)
from spoteval.simulate import (
    DEFAULT_RUNS,
    DEFAULT_SEED,
    DURATION_MODELS,
    Empirical,
    Fixed,
    Sampler,
    Simulation,
    simulate,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STACKS_DIR = REPO_ROOT / "stacks"
STACK_WORKLOAD_KEY = "spot-eval:workload"
EXIT_OK, EXIT_BAD_INPUT, EXIT_NONE = 0, 2, 3


# --- where the workload comes from --------------------------------------------------------------


@dataclass(frozen=True)
class LoadedWorkload:
    """A raw workload mapping, the key prefix its errors use, and a description for the report."""

    raw: Mapping[str, Any]
    where: str
    source: str


class InputHook(Protocol):
    """Refines the raw workload before it is parsed; adds its own command-line options."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def apply(self, args: argparse.Namespace, loaded: LoadedWorkload) -> LoadedWorkload: ...


#: Hooks applied in order after the workload is loaded (file, stack or example) and before parsing.
INPUT_HOOKS: list[InputHook] = [FromRun()]


def load_yaml(path: Path, what: str) -> object:
    """Load a YAML file; a missing file or malformed YAML is a `PlacementError` naming the file."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlacementError(str(path), f"{what} not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PlacementError(str(path), f"cannot read the {what}: {err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "cannot parse"
        raise PlacementError(str(path), f"malformed YAML{where}: {problem}") from None


def load_stack_workload(name: str, stacks_dir: Path) -> LoadedWorkload:
    """The `spot-eval:workload` block of `stacks_dir/Pulumi.NAME.yaml`."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise PlacementError("--stack", f"not a stack name: {name!r}")
    path = stacks_dir / f"Pulumi.{name}.yaml"
    if not path.is_file():
        raise PlacementError("--stack", f"stack {name!r} not found: no {path}")
    doc = load_yaml(path, "stack file")
    config = doc.get("config") if isinstance(doc, Mapping) else None
    if not isinstance(config, Mapping) or config.get(STACK_WORKLOAD_KEY) is None:
        raise PlacementError(
            f"{path}: config.{STACK_WORKLOAD_KEY}", "missing: the stack has no workload block"
        )
    return LoadedWorkload(
        raw=config[STACK_WORKLOAD_KEY], where=STACK_WORKLOAD_KEY, source=f"stack {name} ({path})"
    )


def load_workload(args: argparse.Namespace) -> LoadedWorkload:
    """The workload the command line names (file, stack, or the built-in example), after the hooks."""
    if args.workload is not None:
        path = Path(args.workload)
        raw = load_yaml(path, "workload file")
        if not isinstance(raw, Mapping):
            raise PlacementError(str(path), f"a workload must be a mapping of keys, got {type(raw).__name__}")
        loaded = LoadedWorkload(raw=raw, where="workload", source=str(path))
    elif args.stack is not None:
        loaded = load_stack_workload(args.stack, Path(args.stacks_dir))
    else:
        loaded = LoadedWorkload(raw=EXAMPLE_WORKLOAD, where="workload", source="built-in example workload")
    for hook in INPUT_HOOKS:
        loaded = hook.apply(args, loaded)
    return loaded


# --- simulation inputs --------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationInputs:
    lifetimes: Sampler | None = None
    waits: Sampler | None = None
    trace: LifetimeEstimate | None = None
    trace_source: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def simulation_inputs(args: argparse.Namespace, workload: Workload) -> SimulationInputs:
    """Lifetimes and waits for the simulation: exponential/fixed, or replayed from `--trace`."""
    waits_model = args.waits or ("trace" if args.trace else "fixed")
    if waits_model == "trace" and not args.trace:
        raise PlacementError("--waits", "trace needs --trace FILE")
    if not args.trace:
        return SimulationInputs(waits=DURATION_MODELS[waits_model](workload.wait_hours))
    runs = read_trace(args.trace)
    if not runs.lifetimes_hours:
        raise PlacementError(args.trace, "no preemption in the trace: there is no lifetime to replay")
    estimate = runs.estimate()
    warnings = [f"trace: {w}" for w in estimate.warnings]
    low, high = estimate.interval_hours
    if not low <= workload.lifetime_hours <= high:
        warnings.append(
            f"the workload's lifetime_hours {workload.lifetime_hours:g} is outside the trace's "
            f"{estimate.confidence:.0%} interval [{low:.3g}, {high:.3g}] h"
        )
    waits: Sampler
    if waits_model != "trace":
        waits = DURATION_MODELS[waits_model](workload.wait_hours)
    elif runs.waits_hours:
        waits = Empirical(runs.waits_hours, "trace capacity waits")
    else:
        waits = Fixed(workload.wait_hours)
        warnings.append("the trace has no complete capacity wait: the simulation uses the workload's wait")
    return SimulationInputs(
        lifetimes=Empirical(runs.lifetimes_hours, "trace lifetimes"),
        waits=waits,
        trace=estimate,
        trace_source=runs.source,
        warnings=tuple(warnings),
    )


def cross_check(placement: Placement, simulation: Simulation) -> list[str]:
    """Warn when the simulated mean cost of spot is far from the closed form's (over 10%)."""
    sim = simulation.strategies.get("spot")
    closed = placement.options["spot"].expected_cost
    if sim is None or not math.isfinite(closed) or closed <= 0:
        return []
    gap = sim.mean_cost / closed - 1
    if abs(gap) <= 0.10:
        return []
    return [
        f"the simulated mean cost of spot ({money(sim.mean_cost)}, lifetimes {simulation.lifetimes}) is "
        f"{abs(gap):.0%} {'above' if gap > 0 else 'below'} the closed form's {money(closed)}"
    ]


# --- output -------------------------------------------------------------------------------------


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def document(
    placement: Placement, simulation: Simulation, inputs: SimulationInputs, warnings: list[str]
) -> dict[str, Any]:
    """The JSON document of `--json`."""
    simulated = simulation.to_json()
    simulated["warnings"] = warnings
    simulated["trace"] = (
        {"source": inputs.trace_source, **inputs.trace.to_json()} if inputs.trace is not None else None
    )
    safe: dict[str, Any] = _json_safe(placement.to_json(simulated))
    return safe


def _minutes(h: float) -> str:
    return f"{h * 60:g} min"


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


def report_lines(
    placement: Placement,
    simulation: Simulation,
    inputs: SimulationInputs,
    warnings: Sequence[str],
    source: str,
) -> list[tuple[str, str]]:
    """The report as (style, text) lines; style is "" for plain text or a rich style for headings."""
    w = placement.workload
    lines: list[tuple[str, str]] = [("bold", f"spot-eval placement: {source}"), ("", "")]

    lines.append(("bold", "Inputs"))
    if w.episode_samples_hours:
        length = f"D = mean of {len(w.episode_samples_hours)} samples = {_minutes(w.episode_hours)}"
    else:
        length = f"D = {_minutes(w.episode_hours)}"
    interval = (
        f", interval [{w.lifetime_interval_hours[0]:g}, {w.lifetime_interval_hours[1]:g}] h"
        if w.lifetime_interval_hours
        else ""
    )
    grant = [
        f"{k} {money(v)}"
        for k, v in (("price_cap", w.grant.price_cap), ("budget", w.grant.budget))
        if v is not None
    ]
    items = [
        (
            "episodes",
            f"N = {w.episodes} of {length} ({w.episode_hours:.4g} h), C = {w.concurrency} at a time",
        ),
        ("rounds", f"n = N/C = {w.rounds:g}"),
        ("lifetime", f"tau = {w.lifetime_hours:g} h (mean time from start to preemption){interval}"),
        (
            "restart",
            f"wait W = {_minutes(w.wait_hours)} (not billed), boot B = {_minutes(w.boot_hours)} (billed)",
        ),
        ("prices", ", ".join(f"{k} {money(v)}" for k, v in w.prices.to_json().items()) + " per node-hour"),
        (
            "deadline",
            f"{w.deadline_hours:g} h, met with probability >= {w.deadline_confidence:g}"
            if w.deadline_hours is not None
            else "none",
        ),
        ("spot margin", f"{w.spot_margin:.0%} (spot must cost this much less than the next option)"),
        ("grant", ", ".join(grant) if grant else "no price cap, no budget"),
    ]
    lines += [("", f"  {label:<12} {text}") for label, text in items]
    lines.append(("", ""))

    lines.append(("bold", f"Options (closed form; spot's p_deadline from {simulation.runs} simulated runs)"))
    rows = [
        [
            name,
            money(o.expected_cost),
            f"{o.billed_hours:.2f}",
            f"{o.wall_hours:.2f}",
            _pct(o.efficiency),
            "-" if o.p_deadline is None else f"{o.p_deadline:.2f}",
            "yes" if o.eligible else "no",
        ]
        for name, o in placement.options.items()
    ]
    headers = ["option", "expected cost", "billed h", "wall h", "efficiency", "p_deadline", "eligible"]
    lines += [("", text) for text in text_table(headers, rows)]
    lines.append(("", ""))

    lines.append(
        ("bold", f"Simulated ({simulation.runs} runs, seed {simulation.seed}, {simulation.engine} engine)")
    )
    lines.append(
        ("", f"  lifetimes {simulation.lifetimes}; waits {simulation.waits}; boots {simulation.boots}")
    )
    rows = [
        [
            name,
            money(s.mean_cost),
            f"{money(s.cost_quantiles[0])}-{money(s.cost_quantiles[2])}",
            f"{s.mean_wall_hours:.2f}",
            f"{s.wall_quantiles[2]:.2f}",
            "-" if s.p_deadline is None else f"{s.p_deadline:.2f}",
            f"{s.mean_preemptions:.1f}",
            "-" if s.switched is None else f"{s.switched:.0%}",
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
    ]
    lines += [("", text) for text in text_table(headers, rows)]
    lines += [("", f"  not simulated: {name}: {why}") for name, why in simulation.skipped.items()]
    if inputs.trace is not None:
        t = inputs.trace
        tau = "none (no preemption)" if t.tau_hours is None else f"{t.tau_hours:.3g} h"
        high = f"{t.interval_hours[1]:.3g}" if math.isfinite(t.interval_hours[1]) else "inf"
        cv = "-" if t.cv is None else f"{t.cv:.2f}"
        lines.append(("", f"  trace {inputs.trace_source}:"))
        lines.append(
            (
                "",
                f"    tau {tau}, {t.confidence:.0%} interval [{t.interval_hours[0]:.3g}, {high}] h, "
                f"{t.preemptions} preemptions in {t.total_hours:.1f} h, coefficient of variation {cv}",
            )
        )
    lines.append(("", ""))

    be = placement.break_even
    lines.append(("bold", "Break-even (everything else fixed)"))
    lines.append(("", f"  tau: {be.note}"))
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
    lines.append(("", ""))

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
) -> None:
    """Print the readable report: headings styled on a terminal, plain text when piped."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    for style, text in report_lines(placement, simulation, inputs, warnings, source):
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


# --- command line -------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """Option errors are bad input like any other: one line, exit 2."""

    def error(self, message: str) -> Any:
        raise PlacementError("options", message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m scripts.placement",
        description="Decide where to run an evaluation workload: spot, on-demand or non-preemptible.",
        epilog="Exit codes: 0 decision made, 3 decision 'none', 2 bad input.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("workload", nargs="?", help="workload YAML file (default: the built-in example)")
    source.add_argument(
        "--stack", metavar="NAME", help=f"read the {STACK_WORKLOAD_KEY} block of Pulumi.NAME.yaml"
    )
    parser.add_argument(
        "--stacks-dir",
        default=str(DEFAULT_STACKS_DIR),
        metavar="DIR",
        help="where the stack files are (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="write expected cost against tau to a PNG file")
    parser.add_argument("--trace", metavar="FILE", help="replay lifetimes and capacity waits of a spot trace")
    parser.add_argument(
        "--runs", type=_positive_int, default=DEFAULT_RUNS, help="simulated runs (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default: %(default)s)")
    parser.add_argument(
        "--waits",
        choices=(*DURATION_MODELS, "trace"),
        help="capacity waits in the simulation: the workload's W fixed or exponential, or the trace's "
        "(default: trace with --trace, else fixed)",
    )
    for hook in INPUT_HOOKS:
        hook.add_arguments(parser)
    return parser


@dataclass(frozen=True)
class Decided:
    """A decision with what it was made from: the closed form, the simulation and their warnings."""

    placement: Placement
    simulation: Simulation
    inputs: SimulationInputs
    warnings: list[str]

    def document(self) -> dict[str, Any]:
        """What `--json` prints."""
        return document(self.placement, self.simulation, self.inputs, self.warnings)


def decide(args: argparse.Namespace, workload: Workload) -> Decided:
    """Simulate the workload (spot's deadline chance, the cross-check) and decide."""
    inputs = simulation_inputs(args, workload)
    simulation = simulate(
        workload, runs=args.runs, seed=args.seed, lifetimes=inputs.lifetimes, waits=inputs.waits
    )
    spot = simulation.strategies.get("spot")
    placement = place(workload, spot.p_deadline if spot else None, simulation.runs if spot else None)
    return Decided(placement, simulation, inputs, [*inputs.warnings, *cross_check(placement, simulation)])


def run(args: argparse.Namespace) -> int:
    loaded = load_workload(args)
    d = decide(args, parse_workload(loaded.raw, where=loaded.where))
    if args.plot:
        plot(Path(args.plot), d.placement, d.inputs)
    if args.json:
        print(json.dumps(d.document(), indent=2, allow_nan=False))
    else:
        render_report(d.placement, d.simulation, d.inputs, d.warnings, loaded.source)
        if args.plot:
            print(f"plot written to {args.plot}")
    return EXIT_NONE if d.placement.decision == "none" else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(build_parser().parse_args(argv))
    except PlacementError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
