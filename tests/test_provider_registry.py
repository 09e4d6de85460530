"""The provider registry: every provider is one fact module, typed by the `Provider` protocol (mypy
checks the dict below and `REGISTRY`), every fact has its source and date, an unknown provider is an
error naming the known ones, and a new provider needs its modules and one line in the registry."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import pytest

from spoteval import providers
from spoteval.providers import (
    FACT_FIELDS,
    REGISTRY,
    Lacks,
    Metadata,
    PriceApi,
    Provider,
    Source,
    UnknownProvider,
    facts,
    provider,
)
from tests import toy_provider

ROOT: Final = Path(__file__).resolve().parent.parent
TESTS: Final = Path(__file__).resolve().parent
#: mypy proves the toy module complete, as it does every module of REGISTRY
TOY: Final[dict[str, Provider]] = {"toy": toy_provider}
DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _sources(value: object) -> Iterator[Source]:
    """Every Source reachable from a fact (dataclasses, mappings, tuples and sets of them)."""
    if isinstance(value, Source):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _sources(getattr(value, f.name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _sources(item)
    elif isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _sources(item)


def _facts_of(p: Provider) -> dict[str, object]:
    return {
        "FACTS": p.FACTS,
        "NOTICES": p.NOTICES,
        "PRICE": p.PRICE,
        "CAPACITY_SOURCE": p.CAPACITY_SOURCE,
        "REGIONS": p.REGIONS,
        "POOLS": p.POOLS,
        "POOL_SCALE": p.POOL_SCALE,
        "EVENTS": p.EVENTS,
        "PERMISSIONS": p.PERMISSIONS,
        "ROLES": p.ROLES,
        "AGENT_METRIC": p.AGENT_METRIC,
        "FLAVOURS": p.FLAVOURS,
        "PREEMPT_OPTION": p.PREEMPT_OPTION,
    }


def test_the_registry_holds_each_provider_once_under_its_key() -> None:
    assert list(REGISTRY) == ["aws", "gcp", "azure", "k8s", "nebius", "runpod"]
    assert all(p.KEY == key == p.FACTS.key for key, p in REGISTRY.items())
    assert {key: p.__name__ for key, p in REGISTRY.items()} == {  # type: ignore[attr-defined]
        "aws": "spoteval.providers.aws",
        "gcp": "spoteval.providers.gcp",
        "azure": "spoteval.providers.azure",
        "k8s": "spoteval.providers.kubernetes",
        "nebius": "spoteval.providers.nebius",
        "runpod": "spoteval.providers.runpod",
    }


@pytest.mark.parametrize("key", list(REGISTRY))
def test_every_fact_has_a_source_and_a_date(key: str) -> None:
    p = REGISTRY[key]
    assert set(p.FACTS.sources) == set(FACT_FIELDS)  # the metadata service and price API among them
    for name, fact in _facts_of(p).items():
        if not isinstance(fact, Metadata | PriceApi) and dataclasses.is_dataclass(fact):
            assert list(_sources(fact)), f"{key}.{name} has no source"
    found = [s for fact in _facts_of(p).values() for s in _sources(fact)]
    assert all(s.url.startswith("https://") and DATE.match(s.checked) for s in found), key
    shapes = p.INSTANCE_TYPES.values()
    assert all(shape.source.startswith("https://") and DATE.match(shape.checked) for shape in shapes)
    assert (p.CAPACITY_SOURCE is None) == (not p.CAPACITY_CODES)


def test_each_missing_capability_is_a_named_none() -> None:
    lacking = {
        key: sorted(name for name, fact in _facts_of(p).items() if isinstance(fact, Lacks))
        for key, p in REGISTRY.items()
    }
    assert lacking == {
        "aws": [],
        "gcp": ["AGENT_METRIC", "PREEMPT_OPTION"],
        "azure": ["AGENT_METRIC", "PREEMPT_OPTION"],
        "k8s": ["AGENT_METRIC", "NOTICES", "POOLS", "PREEMPT_OPTION", "PRICE", "REGIONS"],
        "nebius": ["AGENT_METRIC", "EVENTS", "NOTICES", "POOLS", "POOL_SCALE", "PREEMPT_OPTION", "REGIONS"],
        "runpod": ["AGENT_METRIC", "EVENTS", "NOTICES", "POOLS", "POOL_SCALE", "PREEMPT_OPTION", "REGIONS"],
    }


def test_an_unknown_provider_is_an_error_naming_the_known_ones() -> None:
    known = "(known: aws, gcp, azure, k8s, nebius, runpod)"
    for lookup in (provider, facts):
        with pytest.raises(UnknownProvider) as caught:
            lookup("lambda")
        assert str(caught.value) == f"unknown provider 'lambda' {known}"
    from spoteval.offers.instances import gpus_of

    with pytest.raises(KeyError, match=re.escape(known)):
        gpus_of("lambda", "gpu_1x_a10")
    from spoteval.clouds import ControlPlaneError
    from spoteval.clouds.base import PlaneOptions, StackOutputs
    from spoteval.clouds.registry import open_plane

    outputs = StackOutputs("lambda", "us-east-1", None, ("n1",), "t", "spot", "s3://b/p", "r", 8000, "static")
    with pytest.raises(ControlPlaneError, match=re.escape(f"unknown provider 'lambda' {known}")):
        open_plane(outputs, "n1", PlaneOptions())
    from spoteval.agent import notices

    with pytest.raises(ValueError, match=re.escape("unknown provider 'lambda' (known: aws, gcp, azure, k8s")):
        notices.provider_watchers("lambda", None, None, print)


def test_the_kubernetes_key_is_k8s_everywhere() -> None:
    from spoteval.events.facts import EVENT_HISTORY
    from spoteval.offers.prices import NO_PRICE_API
    from spoteval.pool_engines import POOL_SCALE

    assert "kubernetes" not in {*EVENT_HISTORY, *NO_PRICE_API, *POOL_SCALE, *providers.BY_KEY}
    assert set(NO_PRICE_API) == {"k8s"}
    assert facts("kubernetes") is facts("k8s")  # the long name still finds it


#: run in a copy of the package with the toy provider registered: what the project does with it
PROBE: Final = r"""
import json
from spoteval.providers import KEYS, facts, provider
from spoteval.agent.config import PROVIDERS as AGENT_PROVIDERS
from spoteval.agent import notices
from spoteval.events.facts import EVENT_HISTORY
from spoteval.offers.instances import gpus_of
from spoteval.offers.prices import NO_PRICE_API, Offer, read_prices
from spoteval.pool_engines import POOL_SCALE
from spoteval.provider_rules import POOL_ENGINES
from spoteval.provider_notes import render
from spoteval.clouds.base import PlaneOptions, StackOutputs
from spoteval.clouds.registry import open_plane

outputs = StackOutputs("toy", "us-west-1", None, ("n1",), "gpu_1x_a10", "spot", "s3://b", "r", 8000, "static")
plane = open_plane(outputs, "n1", PlaneOptions())
plane.stop(1.0)
offer = Offer("toy", "us-west-1", "gpu_8x_h100", "spot", 8)
text = render()
print(json.dumps({
    "keys": list(KEYS),
    "title": facts("toy").title,
    "agent": "toy" in AGENT_PROVIDERS,
    "watchers": notices.provider_watchers("toy", None, None, print),
    "grace": notices.SIGTERM_GRACE_S["toy"],
    "events": EVENT_HISTORY["toy"].capture,
    "price": read_prices([offer], {})[offer],
    "pools": ["toy" in POOL_SCALE, "toy" in POOL_ENGINES],
    "plane": [type(plane).__name__, plane.state().status],
    "gpus": gpus_of("toy", "gpu_8x_h100"),
    "notes": "## Toy GPU cloud (`toy`)" in text,
    "regions": provider("toy").REGIONS.region,
}))
"""


def test_a_toy_eighth_provider_needs_its_modules_and_one_registry_entry(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "spoteval", copy / "spoteval", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TESTS / "toy_provider.py", copy / "spoteval" / "providers" / "toy.py")
    shutil.copy(TESTS / "toy_plane.py", copy / "spoteval" / "clouds" / "toy.py")
    init = copy / "spoteval" / "providers" / "__init__.py"
    text = init.read_text(encoding="utf-8")
    imports = "from spoteval.providers import aws, azure, gcp, kubernetes, nebius, runpod\n"
    entry = '    "runpod": runpod,\n}'
    assert text.count(imports) == text.count(entry) == 1
    init.write_text(
        text.replace(imports, imports.replace("runpod\n", "runpod, toy\n")).replace(
            entry, '    "runpod": runpod,\n    "toy": toy,\n}'
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=copy, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "keys": ["aws", "gcp", "azure", "k8s", "nebius", "runpod", "toy"],
        "title": "Toy GPU cloud",
        "agent": True,
        "watchers": [],
        "grace": 10.0,
        "events": "",
        "price": "the toy cloud publishes no prices",
        "pools": [False, False],
        "plane": ["ToyPlane", "stopped"],
        "gpus": 8,
        "notes": True,
        "regions": r"^[a-z]+-[a-z]+-\d$",
    }
    # the registry is the one place that names it, besides its own modules
    naming = sorted(
        p.relative_to(copy).as_posix()
        for p in (copy / "spoteval").rglob("*.py")
        if re.search(r"\btoy\b", p.read_text(encoding="utf-8"))
    )
    assert naming == ["spoteval/clouds/toy.py", "spoteval/providers/__init__.py", "spoteval/providers/toy.py"]


def test_the_agents_tables_follow_the_facts() -> None:
    """A watcher for each provider whose notice comes from a metadata service, and a price reader
    on the node for each whose price API answers a node with the standard library."""
    from spoteval.agent import notices
    from spoteval.agent.price import PRICE_APIS

    with_notice = {key for key, p in REGISTRY.items() if isinstance(p.NOTICES, Metadata)}
    assert with_notice == {"aws", "gcp", "azure"}
    assert {key for key, make in notices.WATCHERS.items() if make.__name__ != "_no_metadata"} == with_notice
    on_node = {key for key, p in REGISTRY.items() if isinstance(p.PRICE, PriceApi) and p.PRICE.node_markets}
    assert set(PRICE_APIS) == on_node == {"aws", "azure"}
