"""The report as text (`render`), private or shared: one function per section, in the order printed.

Figures are rounded to significant digits and durations given in the unit that fits them
(spoteval/figures.py), so a run of seconds reads as well as one of days.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spoteval import figures
from spoteval.events.match import Ledger
from spoteval.report.analysis import RunReport, Stat, node_statuses
from spoteval.report.as_json import _lost_cost, _shared_cost, _shared_placement, origin_of
from spoteval.report.failures import harness_failures
from spoteval.report.pool import render as render_pool
from spoteval.report.redact import _aliases, _shared_problems, private_strings, scrub
from spoteval.scores import as_text as scores_text


def fmt_s(seconds: float | None) -> str:
    """A duration in the unit that reads best: 42.1 s, 3.5 min, 2.5 h (spoteval.figures.seconds)."""
    return figures.seconds(seconds)


def _money(value: float | None, currency: str | None) -> str:
    if value is None:
        return "-"
    return f"{figures.money(value)} {currency or ''}".strip()


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


@dataclass(frozen=True)
class _View:
    """What every section needs: the report, the console's print, shared or not, node aliases."""

    report: RunReport
    say: Callable[..., None]
    shared: bool
    alias: Mapping[str, str]
    origin: datetime

    def node(self, name: str) -> str:
        return self.alias[name] if self.shared else name

    def when(self, t: datetime) -> str:
        if self.shared:
            return f"+{fmt_s((t - self.origin).total_seconds())}"
        return t.strftime("%m-%d %H:%M:%S")


def _header(v: _View) -> None:
    rec = v.report.record
    if v.shared:
        v.say("Run report (shared: no ids, addresses, bucket or account names, or prices)")
    else:
        v.say(f"Run report: run {rec.run_id} in {rec.store_url}")
    v.say(
        f"{len(rec.events)} events, {len(rec.attempts)} attempts, {len(rec.results)} results; "
        f"{len(v.report.problems)} problem(s) in the record"
    )


def _allocations(v: _View) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Allocations (billed from start to end)", title_justify="left", box=box.SIMPLE_HEAD)
    columns = [
        "node",
        "#",
        "start" if v.shared else "start (UTC)",
        "reason",
        "ended by",
        "lifetime",
        "boot B",
    ]
    for col in columns:
        table.add_column(col, overflow="fold")
    if not v.shared:
        table.add_column("price/h", justify="right")
        table.add_column("cost", justify="right")
    for a in v.report.allocations:
        ended = a.ended_by + (f" ({a.end_reason})" if a.end_reason else "")
        if a.ended_by == "lost":
            ended += ", no notice: ends at its last heartbeat"
        if a.censored:
            ended += ", censored"
        measured = " (measurement)" if a.kind == "measurement" and a.start_reason != "measurement" else ""
        row = [
            v.node(a.node),
            str(a.index),
            v.when(a.start),
            (a.start_reason or "-") + measured,
            ended,
            fmt_s(a.seconds),
            fmt_s(a.boot_s),
        ]
        if not v.shared:
            row += [
                figures.money(a.price, zeros=True) if a.price is not None else "-",
                figures.money(a.cost, zeros=True) if a.cost is not None else "-",
            ]
        table.add_row(*[Text(c) for c in row])
    v.say(table)


def _prices_and_nodes(v: _View) -> None:
    if not v.shared:
        sources = Counter(
            f"{a.currency or '?'} per hour, {a.price_source}"
            for a in v.report.allocations
            if a.price is not None
        )
        if sources:
            v.say("Prices: " + "; ".join(f"{k} ({n} allocation(s))" for k, n in sources.items()))
    statuses = node_statuses(v.report)
    if statuses:
        v.say(
            "Nodes now (as the operator reads the record): "
            + "; ".join(f"{v.node(st.node)} {st.label}" for st in statuses)
        )


def _tau(v: _View) -> None:
    tau = v.report.tau
    if tau is None:
        v.say("Lifetime tau: no allocations in the record")
        return
    pct = round(tau.confidence * 100)
    high = fmt_s(tau.high_s) if tau.high_s is not None else "unbounded"
    if tau.seconds is None:
        v.say(
            f"Lifetime tau: no preemption in {fmt_s(tau.uptime_s)} of uptime; "
            f"tau >= {fmt_s(tau.low_s)} (the {pct}% lower bound, not an estimate)"
        )
    else:
        v.say(
            f"Lifetime tau: {fmt_s(tau.seconds)} ({pct}% interval {fmt_s(tau.low_s)} - {high}) "
            f"from {tau.preemptions} preemption(s) in {fmt_s(tau.uptime_s)} of uptime; "
            f"{tau.censored} censored (stopped by us or still running)"
        )
    for w in tau.warnings:
        v.say(f"  warning: {w}")
    if v.report.preemptions is not None:
        v.say(preemption_line(v.report.preemptions))


def _restart(v: _View) -> None:
    from rich import box
    from rich.table import Table

    rep = v.report
    st = Table(
        title="Restart cost S = S_wait + S_boot (per restart)", title_justify="left", box=box.SIMPLE_HEAD
    )
    for col in ("", "n", "median", "p90", "mean"):
        st.add_column(col, justify="left" if not col else "right")
    st.add_row(*_stat_row("S_wait: preemption -> next start", rep.wait))
    st.add_row(*_stat_row("S_boot: start -> first episode", rep.boot))
    st.add_row(*_stat_row("notice -> end (billed, no new episodes)", rep.notice_tail))
    for k, s in sorted(rep.boot_phases.items()):
        st.add_row(*_stat_row(f"  {k}", s))
    if rep.measured_wait or rep.measured_boot or rep.measured_phases:
        st.add_row(*_stat_row("restart measurement S_wait (start requested -> running)", rep.measured_wait))
        st.add_row(*_stat_row("restart measurement S_boot (running -> serving)", rep.measured_boot))
        for k, s in sorted(rep.measured_phases.items()):
            st.add_row(*_stat_row(f"  measurement {k}", s))
    v.say(st)


def _episodes(v: _View) -> None:
    rep = v.report
    ep = rep.episodes
    att = ep.attempts
    v.say(
        f"Episodes: {ep.manifest if ep.manifest is not None else '?'} in the manifest; "
        f"{ep.completed} completed, {ep.model_failures} final model failures, "
        f"{ep.pending if ep.pending is not None else '?'} pending"
    )
    failures = harness_failures(rep.record.results, ep.manifest)
    if failures.count:
        v.say(failures.line())
        if failures.every_episode:
            v.say("  every episode ended in a harness error: this run measured nothing of the model")
        if not v.shared:
            for episode, why in failures.first:
                v.say(f"  {episode}: {why}")
    if rep.scores:
        v.say(scores_text(rep.scores).rstrip("\n"))
    v.say(
        f"Attempts: {sum(att.values())} ({', '.join(f'{k} {n}' for k, n in sorted(att.items())) or 'none'}); "
        f"concurrency {ep.concurrency or '?'} ({ep.concurrency_source})"
    )
    lost_h = ep.lost_node_hours
    lost_line = f"Interrupted attempts lost {fmt_s(ep.interrupted_lost_s)} of episode time" + (
        f" = {figures.sig(lost_h)} GPU node-hours" if lost_h is not None else ""
    )
    if v.shared:
        share = _shared_cost(rep)["lost_share"]
        if share is not None:
            lost_line += f" ({figures.percent(share)} of the spend)"
    else:
        lost_cost = _lost_cost(rep)
        if lost_cost:
            lost_line += " costing " + ", ".join(_money(n, k) for k, n in lost_cost.items())
    v.say(lost_line)
    if not v.shared:
        spend = ", ".join(_money(n, k) for k, n in sorted(rep.cost.items())) or "unknown"
        extra = f" ({rep.unpriced} allocation(s) without a logged price)" if rep.unpriced else ""
        billed = sum(a.seconds for a in rep.allocations) / 3600.0
        v.say(f"Cost: {spend} for {figures.sig(billed)} billed node-hours ({fmt_s(billed * 3600)}){extra}")


def _efficiency(v: _View) -> None:
    eff = v.report.efficiency
    if eff.measured is None:
        v.say(f"Efficiency: not measurable ({eff.note or 'no billed time'})")
        return
    pred = f"{eff.predicted:.3f}" if eff.predicted is not None else "-"
    dev = f" ({(eff.measured - eff.predicted) / eff.predicted:+.1%})" if eff.predicted else ""
    v.say(
        f"Efficiency (useful / billed node time): measured {eff.measured:.3f}, closed form {pred}{dev} "
        f"for D = {fmt_s(eff.mean_episode_s)} (mean of {eff.episodes}), tau = {fmt_s(eff.tau_s)}, "
        f"B = {fmt_s(eff.restart_overhead_s)} (S_boot {fmt_s(eff.boot_s)} + notice tail "
        f"{fmt_s(eff.notice_tail_s)} per preemption), C = {eff.concurrency}"
        + (f"; {eff.note}" if eff.note else "")
    )


def _pool_and_problems(v: _View) -> None:
    rep = v.report
    if rep.pool is not None:
        v.say("Pool: each node's share, and episode time spent on episodes another node finished")
        for line in render_pool(rep.pool, v.alias if v.shared else None):
            v.say("  " + line)
    if not rep.problems:
        return
    if v.shared:
        parts = [f"{p['count']} {p['category']}" for p in _shared_problems(rep.problems) if "count" in p]
        v.say("Problems in the record: " + ", ".join(parts))
        return
    v.say("Problems in the record (reported, not fatal):")
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in rep.problems:
        grouped[(p.category, p.message)].append(p.key)
    for (cat, msg), keys in list(grouped.items())[:40]:
        more = f" (+{len(keys) - 1} more)" if len(keys) > 1 else ""
        v.say(f"  [{cat}] {keys[0]}: {msg}{more}")
    if len(grouped) > 40:
        v.say(f"  ... and {len(grouped) - 40} more kinds of problem")


def _option_line(name: str, opt: Mapping[str, Any]) -> str:
    cost, eff, wall = opt.get("expected_cost"), opt.get("efficiency"), opt.get("wall_hours")
    left_out = opt.get("why_not") if str(opt.get("why_not") or "").startswith("left out") else None
    if left_out:
        return f"  {name}: {left_out}"
    return "".join(
        [
            f"  {name}: expected cost {figures.money(cost)}"
            if isinstance(cost, int | float)
            else f"  {name}:",
            f", wall {figures.hours(wall)}" if isinstance(wall, int | float) else "",
            f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
            "" if opt.get("eligible", True) else f", not eligible: {opt.get('why_not')}",
        ]
    )


def _deadline(v: _View) -> None:
    rep = v.report
    if rep.deadline is not None:
        for line in rep.deadline.lines(shared=v.shared):
            v.say(line)
    elif rep.deadline_note:
        v.say(f"Deadline: {rep.deadline_note}")


def _placement(v: _View) -> None:
    rep = v.report
    p = rep.placement
    if not p:
        if rep.placement_note:
            v.say(f"Placement for the next run: {rep.placement_note}")
        return
    v.say(f"Placement for the next run (from these measured numbers): {p.get('decision')}")
    if v.shared:
        sp = _shared_placement(p) or {}
        for name, opt in (sp.get("options") or {}).items():
            ratio, eff = opt.get("cost_over_cheapest"), opt.get("efficiency")
            v.say(
                f"  {name}: expected cost {figures.sig(ratio)} x the cheapest"
                if ratio is not None
                else f"  {name}: -",
                f", efficiency {eff:.3f}" if isinstance(eff, int | float) else "",
                f", eligible {opt.get('eligible')}",
                sep="",
            )
        return
    for reason in p.get("reasons") or []:
        v.say(f"  - {reason}")
    for name, opt in (p.get("options") or {}).items():
        if isinstance(opt, Mapping):
            v.say(_option_line(name, opt))
    if rep.placement_note:
        v.say(f"  (inputs: {rep.placement_note})")


SECTIONS: tuple[Callable[[_View], None], ...] = (
    _header,
    _allocations,
    _prices_and_nodes,
    _tau,
    _restart,
    _episodes,
    _efficiency,
    _pool_and_problems,
    _deadline,
    _placement,
)


def render(report: RunReport, *, shared: bool = False, width: int | None = None) -> str:
    """The report as text (rich tables, plain when written to a file or pipe)."""
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    console = Console(
        file=buf, width=width or 130, force_terminal=False, color_system=None, soft_wrap=True, highlight=False
    )
    view = _View(
        report, functools.partial(console.print, markup=False), shared, _aliases(report), origin_of(report)
    )
    for section in SECTIONS:
        section(view)
    text = buf.getvalue()
    if shared:
        text = scrub(text, private_strings(report))
    return text
