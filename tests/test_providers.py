"""spoteval/providers.py: one entry per provider, every fact with its source and the date checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from spoteval import providers
from spoteval.providers import BY_KEY, CHECKED, FACT_FIELDS, K8S_FLAVOURS, PROVIDERS, facts


def test_six_providers_by_name_and_key() -> None:
    assert tuple(PROVIDERS) == ("aws", "gcp", "azure", "kubernetes", "nebius", "runpod")
    assert tuple(BY_KEY) == ("aws", "gcp", "azure", "k8s", "nebius", "runpod")
    assert facts("k8s") is facts("kubernetes") is providers.KUBERNETES
    assert providers.VM_KEYS == ("aws", "gcp", "azure", "nebius")
    assert providers.BILLED_FROM_BOOT == frozenset({"aws", "gcp", "azure", "nebius"})


def test_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown provider 'ibm' \\(known: aws, gcp, azure, k8s"):
        facts("ibm")


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_every_fact_has_a_documentation_link_and_the_date_checked(name: str) -> None:
    entry = PROVIDERS[name]
    assert set(entry.sources) == set(FACT_FIELDS)
    for fact, source in entry.sources.items():
        assert source.url.startswith("https://"), (name, fact)
        assert source.checked == CHECKED == "2026-12-01"


def test_every_kubernetes_flavour_has_a_source() -> None:
    assert set(K8S_FLAVOURS) == {"gke", "eks", "aks", "karpenter", "nebius"}
    for flavour in K8S_FLAVOURS.values():
        assert flavour.source.url.startswith("https://")
        assert flavour.source.checked == CHECKED


def test_notice_and_stop_window() -> None:
    assert {p.key: p.notice_s for p in PROVIDERS.values()} == {
        "aws": 120,
        "gcp": 30,
        "azure": 30,
        "k8s": None,
        "nebius": 60,
        "runpod": 5,
    }
    assert {k: BY_KEY[k].stop_timeout_s for k in providers.VM_KEYS} == {
        "aws": 115,
        "gcp": 25,
        "azure": 25,
        "nebius": 55,
    }
    assert {k: f.grace_s for k, f in K8S_FLAVOURS.items()} == {
        "gke": 10,
        "eks": 115,
        "aks": 25,
        "karpenter": 115,
        "nebius": 55,
    }
    with pytest.raises(ValueError, match="kubernetes: the notice depends on the Kubernetes flavour"):
        _ = providers.KUBERNETES.stop_timeout_s


def test_metadata_urls() -> None:
    aws, gcp, azure, nebius = (BY_KEY[k].metadata for k in ("aws", "gcp", "azure", "nebius"))
    assert aws is not None and gcp is not None and azure is not None and nebius is not None
    assert aws.url("instance_action") == "http://169.254.169.254/latest/meta-data/spot/instance-action"
    assert gcp.url("preempted") == "http://metadata.google.internal/computeMetadata/v1/instance/preempted"
    assert azure.url("scheduled_events") == (
        "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"
    )
    assert nebius.url("token") == "http://metadata.nebius.internal/v1/iam/sa/token"
    assert BY_KEY["k8s"].metadata is None and BY_KEY["runpod"].metadata is None


def test_standard_library_only() -> None:
    """The package ships in the node's agent bundle: it imports nothing beyond the standard library
    and its own modules."""
    imported: set[str] = set()
    for module in sorted(Path(providers.__file__).parent.glob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported |= {
            (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
    assert imported == {
        "__future__",
        "collections.abc",
        "dataclasses",
        "re",
        "typing",
        "spoteval.providers",
        "spoteval.providers.base",
    }
