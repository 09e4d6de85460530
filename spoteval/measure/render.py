"""The measurement for people: the plan, the report, and the plot of phases per cycle."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spoteval.agent.server_phases import PHASE_NAMES
from spoteval.measure.phases import PHASE_LABELS, PHASES, MeasureError

# --- output -------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = " s") -> str:
    if value is None:
        return "-"
    return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}"


def _price_text(price: Mapping[str, Any] | None) -> str:
    if not price or price.get("per_hour") is None:
        return "unknown"
    return f"{price['per_hour']:g} {price['currency']}/h ({price['source']})"


def print_plan(plan: Mapping[str, Any], console: Console) -> None:
    table = Table(title="measure_restart: plan (nothing is changed without --yes)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    most = plan["most_it_can_cost"]
    rows = [
        ("node", f"{plan['node']} ({plan['provider']} {plan['region']} {plan['zone'] or ''}".strip() + ")"),
        ("instance type", f"{plan['instance_type']} ({plan['market']})"),
        ("state now", plan["state_now"]),
        ("cycles", f"{plan['cycles']} x {plan['mode']}, then leave {plan['leave']}"),
        ("price now", _price_text(plan["price_now"])),
        (
            "the most it can cost",
            "unknown (no price)"
            if most is None
            else f"{most:.4g} {plan['currency']} "
            f"({plan['max_billed_hours']:.2f} node-hours at the price now)",
        ),
        ("grant", json.dumps({k: v for k, v in plan["grant"].items() if v not in (None, [])})),
        ("budget left", "no budget" if plan["budget_left"] is None else f"{plan['budget_left']:.4g}"),
        ("record", plan["record"]),
    ]
    for what, value in rows:
        table.add_row(what, str(value))
    console.print(table)
    console.print("Run again with --yes to measure.")


def print_report(report: Mapping[str, Any], console: Console) -> None:
    cycles = report["cycles"]
    used = [p for p in PHASES if any(p in c["phases"] for c in cycles)]
    table = Table(title=f"Restart cost S: {report['node']} ({report['provider']}, {report['mode']})")
    table.add_column("cycle")
    for p in used:
        table.add_column(p, justify="right")
    for name in ("S_wait", "S_boot", "S"):
        table.add_column(name, justify="right", style="bold")
    table.add_column("address")
    for c in cycles:
        table.add_row(
            str(c["cycle"]),
            *(_fmt(c["phases"].get(p)) for p in used),
            _fmt(c["s_wait_s"]),
            _fmt(c["s_boot_s"]),
            _fmt(c["total_s"]),
            f"{c['address']['before']} -> {c['address']['after']}" if c["address"]["changed"] else "same",
        )
    summary = report["summary"]
    if cycles:
        for stat in ("median", "min", "max"):
            table.add_row(
                stat,
                *(_fmt(summary["phases"][p][stat]) if p in summary["phases"] else "-" for p in used),
                _fmt(summary["s_wait_s"][stat]),
                _fmt(summary["s_boot_s"][stat]),
                _fmt(summary["total_s"][stat]),
                "",
                style="dim",
            )
    console.print(table)
    print_server_phases(cycles, console)
    price = report["price"]
    readings = price["readings"]
    console.print(
        f"price: {_price_text(readings[-1]) if readings else 'not read'}"
        + (
            f", from {price['min']:g} to {price['max']:g}"
            if price["min"] is not None and price["min"] != price["max"]
            else ""
        )
        + (
            f", billed during the measured restarts ~{price['billed_estimate']:.4g} {price['currency']}"
            if price["billed_estimate"] is not None
            else ""
        )
    )
    restart = report["workload"]["restart"]
    if restart["wait_minutes"] is not None:
        console.print(
            f"for the workload file: restart: {{wait_minutes: {restart['wait_minutes']}, "
            f"boot_minutes: {restart['boot_minutes']}}}"
        )
    line = f"outcome: {report['outcome']}, node left {report['final_state'] or 'unknown'}"
    console.print(line + (f" ({report['error']})" if report["error"] else ""))


def print_server_phases(cycles: Sequence[Mapping[str, Any]], console: Console) -> None:
    """`--wait-ready`: the model server's start-up by phase per cycle, from the agent's `ready` event
    (vLLM's own log lines on the node: imports, model inspection, engine start, weights, compile)."""
    with_phases = [c for c in cycles if c.get("server_phases")]
    if not with_phases:
        return
    seen = {name for c in with_phases for name in c["server_phases"]}
    used = [n for n in PHASE_NAMES if n in seen] + sorted(seen - set(PHASE_NAMES))
    table = Table(title="Model server start-up by phase (its log, read by the node's agent)")
    table.add_column("cycle")
    for name in used:
        table.add_column(name, justify="right")
    for c in with_phases:
        table.add_row(str(c["cycle"]), *(_fmt(c["server_phases"].get(n)) for n in used))
    console.print(table)


def plot(report: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cycles = report["cycles"]
    used = [p for p in PHASES if any(p in c["phases"] for c in cycles)]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.8 * len(cycles) + 6), 4.5))
    labels = [str(c["cycle"]) for c in cycles]
    bottom = [0.0] * len(cycles)
    for phase in used:
        heights = [c["phases"].get(phase, 0.0) for c in cycles]
        ax.bar(labels, heights, bottom=bottom, label=PHASE_LABELS[phase])
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xlabel("cycle")
    ax.set_ylabel("seconds")
    ax.set_title(
        f"Restart phases per cycle ({report['provider']} {report['instance_type']}, {report['mode']})"
    )
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise MeasureError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
