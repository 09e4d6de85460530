"""docs/providers.md, written from the providers' fact modules (spoteval/providers/): the provider
notes users read.

    python -m spoteval.provider_notes > docs/providers.md

Every fact the code relies on appears with the page it was checked against and the date, so the
notes and the code cannot drift apart (tests/test_provider_notes.py compares the file with this
rendering).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from spoteval.providers import (
    CHECKED,
    STOP_MARGIN_S,
    EventHistory,
    K8sFlavour,
    Lacks,
    PoolEngine,
    PoolScale,
    Provider,
    ProviderFacts,
    Regions,
    Source,
    registered,
)

INTRO = f"""\
# Provider notes: interruptible GPU capacity

What spot-eval relies on about each provider, in one place. Every fact below is the one the code
uses (each lives in its provider's module in `spoteval/providers/`; this page is generated from them
with `python -m spoteval.provider_notes > docs/providers.md`), with the page it was checked against and
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


def _none(what: str, lacks: Lacks) -> str:
    return f"- {what}: none: {lacks.why} {_cite(lacks.source)}."


def _capabilities(p: Provider) -> Iterator[str]:
    """The facts beside `ProviderFacts`: each capability, or its named none."""
    if isinstance(p.NOTICES, Lacks):
        yield _none("Notice from the provider", p.NOTICES)
    if isinstance(p.PRICE, Lacks):
        yield _none("Price API", p.PRICE)
    if p.CAPACITY_CODES and p.CAPACITY_SOURCE is not None:
        codes = ", ".join(f"`{code}`" for code in sorted(p.CAPACITY_CODES))
        cite = _cite(p.CAPACITY_SOURCE)
        yield f"- Error codes of a start that mean no capacity now (retried later): {codes} {cite}."
    yield _regions(p.REGIONS)
    if isinstance(p.POOLS, PoolEngine):
        serving = ", ".join(sorted(p.POOLS.serving))
        back = "brings back" if p.POOLS.restores_members else "does not bring back"
        yield (
            f"- Pool engine: {p.POOLS.engine}; {back} the members the provider took; serving: {serving} "
            f"{_cite(p.POOLS.source)}."
        )
    else:
        yield _none("Pool engine", p.POOLS)
    yield _pool_scale(p.POOL_SCALE)
    yield _events(p.EVENTS)
    if not isinstance(p.AGENT_METRIC, Lacks):
        m = p.AGENT_METRIC
        yield (
            f"- Metric the agent publishes for the idle stop rule: `{m.namespace}/{m.metric}` by "
            f"`{m.dimension}`, every {m.interval_s:g} s, at `{m.url}` ({m.version}) {_cite(m.source)}."
        )
    if not isinstance(p.PREEMPT_OPTION, Lacks):
        option = p.PREEMPT_OPTION
        yield f"- A simulated preemption needs the plane option `{option.name}` {_cite(option.source)}."
    for name, source in p.PERMISSIONS.items():
        yield f"- Stop rule or permission `{name}` {_cite(source)}."


def _regions(regions: Regions | Lacks) -> str:
    if isinstance(regions, Lacks):
        return _none("Region in the stack config", regions)
    zone = (
        f"the region's name followed by `{regions.zone_suffix}`"
        if regions.zone_suffix
        else "one of " + ", ".join(f"`{z}`" for z in regions.zones)
    )
    return f"- Region spelling: `{regions.region}`; a zone: {zone} {_cite(regions.source)}."


def _pool_scale(scale: PoolScale | Lacks) -> str:
    if isinstance(scale, Lacks):
        return _none("Pool scaled to zero by its node", scale)
    allowed = ", ".join(f"`{permission}`" for permission in scale.permissions)
    return (
        f"- Pool scaled to zero by its node: {scale.method} `{scale.url}` (engine `{scale.engine}`), "
        f"allowed by {allowed} {_cite(scale.source)}."
    )


def _events(events: EventHistory | Lacks) -> str:
    if isinstance(events, Lacks):
        return _none("Event history", events)
    names = ", ".join(f"`{name}`" for name in sorted(events.interruptions))
    kept = f"{events.retention_days:g} days" if events.retention_days is not None else "not documented"
    named = f"; names {_cite(events.names_source)}" if events.names_source is not None else ""
    return (
        f"- Event history: {events.capture}, read with {events.api}; interruptions: {names}; kept "
        f"{kept} {_cite(events.source)}{named}."
    )


def _shapes(p: Provider) -> Iterator[str]:
    yield "### Instance shapes"
    yield ""
    yield "| instance type | GPUs | vCPUs | memory (GiB) | source |"
    yield "|---|---|---|---|---|"
    for name, shape in p.INSTANCE_TYPES.items():
        yield (
            f"| `{name}` | {shape.gpus} x {shape.gpu} | {shape.vcpus} | {shape.memory_gib:g} | "
            f"[source]({shape.source}), checked {shape.checked} |"
        )


def _flavours(flavours: Mapping[str, K8sFlavour]) -> Iterator[str]:
    yield "### Kubernetes flavours"
    yield ""
    yield "| flavour | pod notice | spot nodes selected by | source |"
    yield "|---|---|---|---|"
    for name, flavour in flavours.items():
        selector = ", ".join(f"`{k}: {v}`" for k, v in flavour.spot_selector.items())
        tolerations = ", ".join(f"toleration `{t.key}`" for t in flavour.spot_tolerations)
        chosen = "; ".join(part for part in (selector, tolerations) if part) or "`k8s.node_selector` (stack)"
        note = f" ({flavour.source.note})" if flavour.source.note else ""
        yield (
            f"| {name} | {flavour.notice_s} s | {chosen} | [source]({flavour.source.url}), checked "
            f"{flavour.source.checked}{note} |"
        )


def _roles(title: str, roles: Mapping[str, tuple[str, Source]]) -> Iterator[str]:
    yield f"### {title} roles"
    yield ""
    yield "| role | what for | source |"
    yield "|---|---|---|"
    for use, (role, source) in roles.items():
        yield f"| `{role}` | {use} | {_cite(source)[1:-1]} |"


def render() -> str:
    parts = [INTRO]
    for provider in registered():
        p = provider.FACTS
        parts.append(f"## {p.title} (`{p.key}`)\n")
        parts.append("\n".join([*_lines(p), *_capabilities(provider)]) + "\n")
        if provider.INSTANCE_TYPES:
            parts.append("\n".join(_shapes(provider)) + "\n")
        if provider.FLAVOURS:
            parts.append("\n".join(_flavours(provider.FLAVOURS)) + "\n")
        if provider.ROLES:
            parts.append("\n".join(_roles(p.title.split()[0], provider.ROLES)) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
