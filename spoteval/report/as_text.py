"""The report as text (`render`), private or shared."""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime

from spoteval.events.match import Ledger
from spoteval.report.analysis import RunReport, Stat, node_statuses
from spoteval.report.as_json import _lost_cost, _shared_cost, _shared_placement, origin_of
from spoteval.report.failures import harness_failures
from spoteval.report.pool import render as render_pool
from spoteval.report.redact import _aliases, _shared_problems, private_strings, scrub
from spoteval.scores import as_text as scores_text

# --- text ---------------------------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    """A duration in the unit that reads best: 42.1 s, 3.5 min, 2.40 h."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if abs(seconds) < 120:
        return f"{seconds:.1f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _money(value: float | None, currency: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f} {currency or ''}".strip() if value < 10 else f"{value:,.2f} {currency or ''}".strip()


def _stat_row(name: str, s: Stat | None) -> list[str]:
    if s is None:
        return [name, "0", "-", "-", "-"]
    return [name, str(s.n), fmt_s(s.median), fmt_s(s.p90), fmt_s(s.mean)]


def preemption_line(ledger: Ledger) -> str:
    """The preemptions the agent and the provider saw, each counted once (spoteval/events/match.py)."""
    line = (
        f"Preemptions: {ledger.total} (agent and provider both saw {ledger.both}, only the agent "
        f"{ledger.agent_only}, only the provider {ledger.provider_only})"
    )
    if ledger.provider_stops:
        line += (
            f"; provider-reported stops: {ledger.provider_stops} "
            f"({ledger.repeated_stops} the agent recorded too)"
        )
    return line


def render(report: RunReport, *, shared: bool = False, width: int | None = None) -> str:
    """The report as text (rich tables, plain when written to a file or pipe)."""
    from io import StringIO

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = StringIO()
    console = Console(
        file=buf, width=width or 130, force_terminal=False, color_system=None, soft_wrap=True, highlight=False
    )
    say = functools.partial(console.print, markup=False)
    origin = origin_of(report)
    alias = _aliases(report)
    rec = report.record

    def when(t: datetime) -> str:
        if shared:
            return f"+{fmt_s((t - origin).total_seconds())}"
        return t.strftime("%m-%d %H:%M:%S")

    if shared:
        say("Run report (shared: no ids, addresses, bucket or account names, or prices)")
    else:
        say(f"Run report: run {rec.run_id} in {rec.store_url}")
    say(
        f"{len(rec.events)} events, {len(rec.attempts)} attempts, {len(rec.results)} results; "
        f"{len(report.problems)} problem(s) in the record"
    )

    table = Table(title="Allocations (billed from start to end)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in (
        "node",
        "#",
        "start (UTC)" if not shared else "start",
        "reason",
        "ended by",
        "lifetime",
        "boot B",
    ):
        table.add_column(col, overflow="fold")
    if not shared:
        table.add_column("price/h", justify="right")
        table.add_column("cost", justify="right")
    for a in report.allocations:
        ended = a.ended_by + (f" ({a.end_reason})" if a.end_reason else "")
        if a.ended_by == "lost":
            ended += ", no notice: ends at its last heartbeat"
        if a.censored:
            ended += ", censored"
        row = [
            alias[a.node] if shared else a.node,
            str(a.index),
            when(a.start),
            (a.start_reason or "-")
            + (" (measurement)" if a.kind == "measurement" and a.start_reason != "measurement" else ""),
            ended,
            fmt_s(a.seconds),
            fmt_s(a.boot_s),
        ]
        if not shared:
            row += [
                (f"{a.price:.4f}" if a.price is not None else "-"),
                (f"{a.cost:.4f}" if a.cost is not None else "-"),
            ]
        table.add_row(*[Text(c) for c in row])
    say(table)
    if not shared:
        sources = Counter(
            f"{a.currency or '?'} per hour, {a.price_source}"
            for a in report.allocations
            if a.price is not None
        )
        if sources:
            say("Prices: " + "; ".join(f"{k} ({v} allocation(s))" for k, v in sources.items()))
    statuses = node_statuses(report)
    if statuses:
        say(
            "Nodes now (as the operator reads the record): "
            + "; ".join(f"{alias[st.node] if shared else st.node} {st.label}" for st in statuses)
        )

    tau = report.tau
    if tau is None:
        say("Lifetime tau: no allocations in the record")
    else:
        pct = round(tau.confidence * 100)
        high = fmt_s(tau.high_s) if tau.high_s is not None else "unbounded"
        if tau.seconds is None:
            say(
                f"Lifetime tau: no preemption in {fmt_s(tau.uptime_s)} of uptime; "
                f"{pct}% lower bound {fmt_s(tau.low_s)}"
            )
        else:
            say(
                f"Lifetime tau: {fmt_s(tau.seconds)} ({pct}% interval {fmt_s(tau.low_s)} - {high}) "
                f"from {tau.preemptions} preemption(s) in {fmt_s(tau.uptime_s)} of uptime; "
                f"{tau.censored} censored (stopped by us or still running)"
            )
        for w in tau.warnings:
            say(f"  warning: {w}")
    if report.preemptions is not None:
        say(preemption_line(report.preemptions))

    st = Table(
        title="Restart cost S = S_wait + S_boot (per restart)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for col in ("", "n", "median", "p90", "mean"):
        st.add_column(col, justify="left" if not col else "right")
    st.add_row(*_stat_row("S_wait: preemption -> next start", report.wait))
    st.add_row(*_stat_row("S_boot: start -> first episode", report.boot))
    st.add_row(*_stat_row("notice -> end (billed, no new episodes)", report.notice_tail))
    for k, s in sorted(report.boot_phases.items()):
        st.add_row(*_stat_row(f"  {k}", s))
    if report.measured_wait or report.measured_boot or report.measured_phases:
        st.add_row(
            *_stat_row("restart measurement S_wait (start requested -> running)", report.measured_wait)
        )
        st.add_row(*_stat_row("restart measurement S_boot (running -> serving)", report.measured_boot))
        for k, s in sorted(report.measured_phases.items()):
            st.add_row(*_stat_row(f"  measurement {k}", s))
    say(st)

    ep = report.episodes
    att = ep.attempts
    say(
        f"Episodes: {ep.manifest if ep.manifest is not None else '?'} in the manifest; "
        f"{ep.completed} completed, {ep.model_failures} final model failures, "
        f"{ep.pending if ep.pending is not None else '?'} pending"
    )
    failures = harness_failures(report.record.results, ep.manifest)
    if failures.count:
        say(failures.line())
        if failures.every_episode:
            say("  every episode ended in a harness error: this run measured nothing of the model")
        if not shared:
            for episode, why in failures.first:
                say(f"  {episode}: {why}")
    if report.scores:
        say(scores_text(report.scores).rstrip("\n"))
    say(
        f"Attempts: {sum(att.values())} ({', '.join(f'{k} {v}' for k, v in sorted(att.items())) or 'none'}); "
        f"concurrency {ep.concurrency or '?'} ({ep.concurrency_source})"
    )
    lost_h = ep.lost_node_hours
    lost_line = f"Interrupted attempts lost {fmt_s(ep.interrupted_lost_s)} of episode time" + (
        f" = {lost_h:.4f} GPU node-hours" if lost_h is not None else ""
    )
    if shared:
        share = _shared_cost(report)["lost_share"]
        if share is not None:
            lost_line += f" ({share:.1%} of the spend)"
    else:
        lost_cost = _lost_cost(report)
        if lost_cost:
            lost_line += " costing " + ", ".join(_money(v, k) for k, v in lost_cost.items())
    say(lost_line)
    if not shared:
        spend = ", ".join(_money(v, k) for k, v in sorted(report.cost.items())) or "unknown"
        extra = f" ({report.unpriced} allocation(s) without a logged price)" if report.unpriced else ""
        billed = sum(a.seconds for a in report.allocations) / 3600.0
        say(f"Cost: {spend} for {billed:.4f} billed node-hours{extra}")

    eff = report.efficiency
    if eff.measured is None:
        say(f"Efficiency: not measurable ({eff.note or 'no billed time'})")
    else:
        pred = f"{eff.predicted:.3f}" if eff.predicted is not None else "-"
        dev = ""
        if eff.predicted:
            dev = f" ({(eff.measured - eff.predicted) / eff.predicted:+.1%})"
        say(
            f"Efficiency (useful / billed node time): measured {eff.measured:.3f}, closed form {pred}{dev} "
            f"for D = {fmt_s(eff.mean_episode_s)} (mean of {eff.episodes}), tau = {fmt_s(eff.tau_s)}, "
            f"B = {fmt_s(eff.restart_overhead_s)} (S_boot {fmt_s(eff.boot_s)} + notice tail "
            f"{fmt_s(eff.notice_tail_s)} per preemption), C = {eff.concurrency}"
            + (f"; {eff.note}" if eff.note else "")
        )

    if report.pool is not None:
        say("Pool: each node's share, and episode time spent on episodes another node finished")
        for line in render_pool(report.pool, alias if shared else None):
            say("  " + line)

    if report.problems:
        if shared:
            parts = [
                f"{p['count']} {p['category']}" for p in _shared_problems(report.problems) if "count" in p
            ]
            say("Problems in the record: " + ", ".join(parts))
        else:
            say("Problems in the record (reported, not fatal):")
            grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
            for p in report.problems:
                grouped[(p.category, p.message)].append(p.key)
            for (cat, msg), keys in list(grouped.items())[:40]:
                more = f" (+{len(keys) - 1} more)" if len(keys) > 1 else ""
                say(f"  [{cat}] {keys[0]}: {msg}{more}")
            if len(grouped) > 40:
                say(f"  ... and {len(grouped) - 40} more kinds of problem")

    _render_placement(say, report, shared)
    text = buf.getvalue()
    if shared:
        text = scrub(text, private_strings(report))
    return text


def _render_placement(say: Callable[..., None], report: RunReport, shared: bool) -> None:
    p = report.placement
    if not p:
        if report.placement_note:
            say(f"Placement for the next run: {report.placement_note}")
        return
    say(f"Placement for the next run (from these measured numbers): {p.get('decision')}")
    if shared:
        sp = _shared_placement(p) or {}
        for name, opt in (sp.get("options") or {}).items():
            ratio = opt.get("cost_over_cheapest")
            eff = opt.get("efficiency")
            say(
                f"  {name}: expected cost {ratio:.2f} x the cheapest"
                if ratio is not None
                else f"  {name}: -",
                f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
                f", eligible {opt.get('eligible')}",
                sep="",
            )
        return
    for reason in p.get("reasons") or []:
        say(f"  - {reason}")
    for name, opt in (p.get("options") or {}).items():
        if isinstance(opt, Mapping):
            cost = opt.get("expected_cost")
            eff = opt.get("efficiency")
            wall = opt.get("wall_hours")
            say(
                f"  {name}: expected cost {cost:.2f}" if isinstance(cost, int | float) else f"  {name}:",
                f", wall {wall:.2f} h" if isinstance(wall, int | float) else "",
                f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
                "" if opt.get("eligible", True) else f", not eligible: {opt.get('why_not')}",
                sep="",
            )
    if report.placement_note:
        say(f"  ({report.placement_note})")
