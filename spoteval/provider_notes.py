"""docs/providers.md, written from spoteval/providers.py: the provider notes users read.

    python -m spoteval.provider_notes > docs/providers.md

Every fact the code relies on appears with the page it was checked against and the date, so the
notes and the code cannot drift apart (tests/test_provider_notes.py compares the file with this
rendering).
"""

from __future__ import annotations

from collections.abc import Iterator

from spoteval.provider_rules import NEBIUS_ROLES
from spoteval.providers import (
    CHECKED,
    K8S_FLAVOURS,
    PROVIDERS,
    STOP_MARGIN_S,
    ProviderFacts,
    Source,
)

INTRO = f"""\
# Provider notes: interruptible GPU capacity

What spot-eval relies on about each provider, in one place. Every fact below is the one the code
uses (all of them live in `spoteval/providers.py`; this page is generated from it with
`python -m spoteval.provider_notes > docs/providers.md`), with the page it was checked against and
the date ({CHECKED}). Notice periods, restart semantics and address behaviour change over time:
recheck the provider's current documentation before relying on them.

The node agent listens to the provider's notice AND to SIGTERM, and never relies on the notice to
save results: every completed episode is uploaded when it completes. The agent's service gets a
stop window {STOP_MARGIN_S} s inside each notice, so its own shutdown ends before the provider's.
"""


def _cite(source: Source) -> str:
    note = f"; {source.note}" if source.note else ""
    return f"([source]({source.url}), checked {source.checked}{note})"


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _lines(p: ProviderFacts) -> Iterator[str]:
    s = p.sources
    notice = f"{p.notice_s} s" if p.notice_s is not None else "depends on the flavour (below)"
    yield f"- Notice before the capacity is taken back: {notice} {_cite(s['notice_s'])}."
    yield f"- How the notice arrives: {p.notice_via} {_cite(s['notice_via'])}."
    yield (
        f"- Seconds from SIGTERM to SIGKILL the agent assumes: {p.sigterm_grace_s:g} "
        f"{_cite(s['sigterm_grace_s'])}."
    )
    if p.metadata is not None:
        m = p.metadata
        headers = ", ".join(f"`{k}: {v}`" for k, v in m.headers.items()) or "none (a session token)"
        paths = ", ".join(f"`{path}`" for path in m.paths.values())
        poll = f"; polled every {m.poll_s:g} s" if m.poll_s is not None else "; no notice there"
        yield (
            f"- Instance metadata service: `{m.base_url}`, headers {headers}, paths {paths}{poll} "
            f"{_cite(s['metadata'])}."
        )
    else:
        yield f"- Instance metadata service: none used {_cite(s['metadata'])}."
    if p.price is not None:
        where = f"`{p.price.url}`" if p.price.url else "the SDK only"
        on_node = ", ".join(sorted(p.price.node_markets)) or "none (the price is configured)"
        yield (
            f"- Price in force: {where} ({p.price.version}; auth: {p.price.auth}); the node reads its "
            f"own price on: {on_node} {_cite(s['price'])}."
        )
    else:
        yield f"- Price in force: no price API; the stack's configured price {_cite(s['price'])}."
    if p.api_urls:
        urls = ", ".join(f"{name} `{url}`" for name, url in p.api_urls.items())
        yield f"- Other API endpoints: {urls} {_cite(s['api_urls'])}."
    yield f"- Billed from the node's boot: {_yes(p.billed_from_boot)} {_cite(s['billed_from_boot'])}."
    yield f"- After a reclaim: {p.restart} {_cite(s['restart'])}."
    yield (
        f"- Comes back by itself: {_yes(p.restarts_itself)} {_cite(s['restarts_itself'])}; a stopped "
        f"node stays stopped: {_yes(p.can_stay_stopped)} {_cite(s['can_stay_stopped'])}."
    )
    yield (
        f"- Address: {p.address} {_cite(s['address'])}; a single node's default: {p.default_address} "
        f"{_cite(s['default_address'])}."
    )
    yield (
        f"- Takes a price bid: {_yes(p.takes_bid)} {_cite(s['takes_bid'])}; markets: "
        f"{', '.join(p.markets)} {_cite(s['markets'])}."
    )
    poweroff = p.os_poweroff or p.os_poweroff_billed or "stops the node"
    yield f"- Power-off from inside the OS: {poweroff} {_cite(s['os_poweroff'])}."
    stop = "through the provider's API (`on_done: api_stop`)" if p.api_stop else "not through the API"
    yield f"- The agent stops its own node: {stop} {_cite(s['api_stop'])}."


def _flavours() -> Iterator[str]:
    yield "### Kubernetes flavours"
    yield ""
    yield "| flavour | pod notice | spot nodes selected by | source |"
    yield "|---|---|---|---|"
    for name, flavour in K8S_FLAVOURS.items():
        selector = ", ".join(f"`{k}: {v}`" for k, v in flavour.spot_selector.items())
        tolerations = ", ".join(f"toleration `{t.key}`" for t in flavour.spot_tolerations)
        chosen = "; ".join(part for part in (selector, tolerations) if part) or "`k8s.node_selector` (stack)"
        note = f" ({flavour.source.note})" if flavour.source.note else ""
        yield (
            f"| {name} | {flavour.notice_s} s | {chosen} | [source]({flavour.source.url}), checked "
            f"{flavour.source.checked}{note} |"
        )


def _nebius_roles() -> Iterator[str]:
    yield "### Nebius roles"
    yield ""
    yield "| role | what for | source |"
    yield "|---|---|---|"
    for use, (role, source) in NEBIUS_ROLES.items():
        yield f"| `{role}` | {use} | {_cite(source)[1:-1]} |"


def render() -> str:
    parts = [INTRO]
    for p in PROVIDERS.values():
        parts.append(f"## {p.title} (`{p.key}`)\n")
        parts.append("\n".join(_lines(p)) + "\n")
        if p.name == "kubernetes":
            parts.append("\n".join(_flavours()) + "\n")
        if p.name == "nebius":
            parts.append("\n".join(_nebius_roles()) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
