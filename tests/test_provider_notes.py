"""docs/providers.md is the providers' fact modules (spoteval/providers/) in prose: regenerated, it
is the same file, and every fact's source and date appear in it."""

from __future__ import annotations

from pathlib import Path

from spoteval.provider_notes import render
from spoteval.provider_rules import NEBIUS_ROLES
from spoteval.providers import CHECKED, K8S_FLAVOURS, PROVIDERS

DOC = Path(__file__).resolve().parent.parent / "docs" / "providers.md"


def test_the_notes_are_the_rendering_of_the_facts() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/providers.md is out of date: python -m spoteval.provider_notes > docs/providers.md"
    )


def test_every_fact_is_cited_with_its_source_and_date() -> None:
    text = render()
    for facts in PROVIDERS.values():
        assert f"## {facts.title} (`{facts.key}`)" in text
        for source in facts.sources.values():
            assert f"[source]({source.url}), checked {CHECKED}" in text
        if facts.metadata is not None:
            assert f"`{facts.metadata.base_url}`" in text
        if facts.price is not None and facts.price.url is not None:
            assert f"`{facts.price.url}`" in text
    for name, flavour in K8S_FLAVOURS.items():
        assert f"| {name} | {flavour.notice_s} s |" in text
    for use, (role, source) in NEBIUS_ROLES.items():
        assert f"| `{role}` | {use} | [source]({source.url}), checked {CHECKED}" in text
    # 15 cited facts per provider, one more where it has other API endpoints (Nebius, Runpod), one
    # per flavour and role; then the capabilities: AWS 17 (capacity codes, regions, pool engine,
    # pool scaling, events and their names, the agent metric, the preemption option, 5 permissions,
    # 4 shapes), GCP 12 (no agent metric, 3 permissions, 3 shapes), Azure 12 (2 permissions, 4
    # shapes), Kubernetes 6 (no notices, no price API, no regions, no pool engine, pool scaling,
    # events), Nebius and Runpod 5 each (no notices, regions, pool engine, pool scaling or events)
    assert text.count(f"checked {CHECKED}") == 4 * 15 + 2 * 16 + 5 + 5 + 17 + 12 + 12 + 6 + 5 + 5 == 159
