"""The shared view: the private strings of a report, and scrubbing them from text and JSON."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from spoteval.redaction import private_identifiers
from spoteval.report.analysis import RunReport
from spoteval.report.load import PROBLEM_CATEGORIES, Problem

# --- shared view (redaction) --------------------------------------------------------------------


def private_strings(report: RunReport) -> set[str]:
    """Every string in the run's record that a shared report must not carry."""
    found: set[str] = {report.record.run_id}
    url = report.record.store_url
    if url:
        found.add(url)
        parsed = urlparse(url)
        if parsed.netloc:
            found.add(parsed.netloc)
        if parsed.path.strip("/"):
            found.add(parsed.path.rstrip("/"))
    for e in report.record.events:
        found |= private_identifiers(e)
    for a in report.record.attempts:
        found.add(a.node)
    for r in report.record.results.values():
        found.add(r.node)
    return {s for s in found if s and len(s) >= 2}


def _aliases(report: RunReport) -> dict[str, str]:
    nodes: list[str] = []
    for a in report.allocations:
        if a.node not in nodes:
            nodes.append(a.node)
    return {n: f"node-{i}" for i, n in enumerate(nodes, start=1)}


_PLAIN = re.compile(r"^[A-Za-z0-9_.:-]{1,40}$")


def _shared_problems(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    """Problems by category, without keys or values (they may carry identifiers)."""
    counts = Counter(p.category for p in problems)
    fields: Counter[str] = Counter()
    for p in problems:
        if p.category == "unknown_field":
            for raw in p.message.split(":", 1)[-1].split(","):
                name = raw.strip()
                if _PLAIN.match(name):
                    fields[name] += 1
    out: list[dict[str, Any]] = [{"category": c, "count": counts[c]} for c in PROBLEM_CATEGORIES if counts[c]]
    if fields:
        out.append({"category": "unknown_field_names", "names": sorted(fields)})
    return out


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every private string in `text` (longest first) with `[private]`."""
    for s in sorted(set(secrets), key=len, reverse=True):
        if s:
            text = text.replace(s, "[private]")
    return text


def scrub_json(value: Any, secrets: Iterable[str]) -> Any:
    """`scrub` applied to every string (keys too) of a JSON-like value."""
    private = sorted({s for s in secrets if s}, key=len, reverse=True)

    def clean(text: str) -> str:
        for s in private:
            text = text.replace(s, "[private]")
        return text

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return clean(v)
        if isinstance(v, Mapping):
            return {clean(str(k)): walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)
