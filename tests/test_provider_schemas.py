"""The provider-schema extracts (tests/data/provider_schemas/, read by tests/provider_schemas.py) know
every resource type and every input path the stacks render, and nothing else: a stack that starts
setting a property nobody has read the provider's replacement rules for fails here, and so does an
SDK upgrade the extract was not read again for."""

from __future__ import annotations

import copy
import functools
import json
from datetime import date, datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from components.mocks import Rendered, read_stack_config, render_config, stack_files, stack_name
from tests.provider_schemas import (
    DATA_DIR,
    ResourceSchema,
    SchemaError,
    input_paths,
    load,
    load_all,
    uncovered,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
STACKS = {stack_name(p): p for p in stack_files()}
RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "stack_urns.json").read_text(encoding="utf-8")
)
#: label -> config changes: every stack with its pool, no-compute, on-demand and static-address
#: variants (tests/data/stack_urns.json), plus the options that declare further resource types
VARIANTS: dict[str, dict[str, Any]] = {
    **{label: dict(entry["changes"]) for label, entry in RECORDED.items()},
    "azure-eastus+max-runtime": {"stop__max_runtime_hours": 6},
    "azure-eastus+no-cap": {"grant__price_cap": None},
    "gcp-us-central1+budget": {"gcp__billing_account": "01ABCD-23EF45-6789AB"},
    "k8s-gke+eks": {"k8s__flavour": "eks"},
    "k8s-gke+aks": {"k8s__flavour": "aks"},
    "nebius-eu-north1+on-demand": {"node__market": "on_demand", "grant__price_cap": 3.0},
}
#: what the extracts do not cover, and why: a stack's explicit providers (no inputs the plan
#: replaces on), and the Runpod pod and volume, dynamic resources whose diff is this project's own
#: (components/runpod_provider.py)
NOT_PROVIDER_RESOURCES = ("pulumi:providers:", "pulumi-python:dynamic:")
#: the SDK each file was read for (package name -> distribution name)
DISTRIBUTIONS = {
    "pulumi-aws": "pulumi_aws",
    "pulumi-gcp": "pulumi_gcp",
    "pulumi-azure-native": "pulumi_azure_native",
    "pulumi-kubernetes": "pulumi_kubernetes",
    "pulumi-nebius": "pulumi_nebius",
}


@functools.cache
def rendered(label: str) -> Rendered:
    stack = label.split("+", maxsplit=1)[0]
    config = copy.deepcopy(read_stack_config(STACKS[stack]))
    for path, value in VARIANTS[label].items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    return render_config(stack, config, now=NOW)


def provider_resources(r: Rendered) -> list[Any]:
    return [d for d in r.resources if d.custom and not d.type.startswith(NOT_PROVIDER_RESOURCES)]


@functools.cache
def schemas() -> dict[str, ResourceSchema]:
    return load_all()


def test_every_file_names_its_sources_version_licence_and_date() -> None:
    files = sorted(DATA_DIR.glob("*.json"))
    assert [f.name for f in files] == [
        "aws.json",
        "azure-native.json",
        "gcp.json",
        "kubernetes.json",
        "nebius.json",
    ]
    for f in files:
        doc = load(f)
        assert doc.checked == date(2026, 12, 1), f.name
        assert doc.sources and all(s.licence and s.url.startswith("https://") for s in doc.sources), f.name
        assert all(s.commit or s.version for s in doc.sources), f.name
        # read for the SDK the stacks render with: an upgrade needs the extract read again
        assert metadata.version(DISTRIBUTIONS[doc.package]) == doc.package_version, f.name


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_every_rendered_input_has_replacement_knowledge(label: str) -> None:
    known = schemas()
    for d in provider_resources(rendered(label)):
        assert d.type in known, f"{label}: {d.type} has no provider schema extract"
        assert uncovered(known[d.type], d.inputs) == [], (label, d.type, d.name)


def test_the_extracts_hold_exactly_what_the_stacks_render() -> None:
    used: dict[str, set[str]] = {}
    for label in VARIANTS:
        for d in provider_resources(rendered(label)):
            used.setdefault(d.type, set()).update(input_paths(d.inputs, schemas()[d.type]))
    assert sorted(used) == sorted(schemas())
    assert len(used) == 84  # 83 + the Nebius pricing policy (the bid)
    for token, paths in used.items():
        assert sorted(paths) == sorted(schemas()[token].properties), token


def test_the_facts_the_day_two_plan_turns_on() -> None:
    s = schemas()
    market = s["aws:ec2/instance:Instance"].properties["instanceMarketOptions"]
    # hashicorp/terraform-provider-aws#38141: adding the block replaces, removing it plans nothing
    assert market.replaces and market.kept_when_removed
    assert s["aws:ec2/instance:Instance"].properties["subnetId"].replaces
    assert not s["aws:ec2/instance:Instance"].properties["userData"].replaces
    assert not s["aws:ec2/launchTemplate:LaunchTemplate"].properties["userData"].replaces
    assert s["aws:ec2/volumeAttachment:VolumeAttachment"].properties["instanceId"].replaces
    spot = s["aws:autoscaling/group:Group"].properties[
        "mixedInstancesPolicy.instancesDistribution.onDemandPercentageAboveBaseCapacity"
    ]
    assert not spot.replaces and spot.kept_when_removed
    gcp = s["gcp:compute/instance:Instance"].properties
    assert gcp["scheduling.provisioningModel"].replaces and gcp["scheduling.preemptible"].replaces
    assert gcp["scheduling.maxRunDuration"].replaces and not gcp["metadata"].replaces
    assert gcp["metadata"].is_map
    template = s["gcp:compute/instanceTemplate:InstanceTemplate"].properties
    assert all(p.replaces for p in template.values() if "." not in p.path)
    nebius = s["nebius:index/computeV1Instance:ComputeV1Instance"].properties
    assert nebius["preemptible"].replaces and not nebius["preemptible"].kept_when_removed
    assert not nebius["stopped"].replaces
    job = s["kubernetes:batch/v1:Job"].properties
    assert job["spec.template"].replaces and job["spec.parallelism"].replaces
    assert not job["spec.backoffLimit"].replaces
    pvc = s["kubernetes:core/v1:PersistentVolumeClaim"].properties
    assert pvc["spec.storageClassName"].replaces and not pvc["spec.resources.requests"].replaces
    assert s["kubernetes:core/v1:ConfigMap"].properties["data"].replaces
    role = s["azure-native:authorization:RoleAssignment"].properties
    assert role["principalId"].replaces and role["scope"].replaces and not role["principalType"].replaces
    assert s["azure-native:authorization:RoleDefinition"].properties["scope"].replaces
    assert not s["azure-native:compute:VirtualMachine"].properties["priority"].replaces
    kept = [
        t
        for t, r in s.items()
        if r.semantics != "terraform-sdkv2" and any(p.kept_when_removed for p in r.properties.values())
    ]
    assert kept == []


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _minimal() -> dict[str, Any]:
    return {
        "provider": "x",
        "package": {"name": "pulumi-x", "version": "1.0.0"},
        "checked": "2026-12-01",
        "semantics": "kubernetes",
        "sources": [{"repository": "o/r", "url": "https://example.invalid/r", "licence": "MIT"}],
        "limits": [],
        "resources": {"x:index:Thing": {"properties": {"name": ["replace"], "labels": ["map"]}}},
    }


def test_a_minimal_file_loads_and_walks_inputs_up_to_a_map(tmp_path: Path) -> None:
    doc = load(_write(tmp_path, _minimal()))
    thing = doc.resources["x:index:Thing"]
    inputs = {"name": "a", "labels": {"k.io/x": "1"}, "spec": {"size": 1}}
    assert sorted(input_paths(inputs, thing)) == ["labels", "name", "spec"]
    assert uncovered(thing, inputs) == ["spec"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["resources"]["x:index:Thing"]["properties"].update(name=["forcenew"]),
            "unknown flag 'forcenew'",
        ),
        (lambda d: d.update(extra=1), "x.json: unknown key 'extra'"),
        (lambda d: d.pop("sources"), "x.json: missing key 'sources'"),
        (lambda d: d.update(sources=[]), "x.json.sources: at least one source is needed"),
        (lambda d: d.update(semantics="cdk"), "x.json.semantics: unknown 'cdk'"),
        (lambda d: d.update(checked="December"), "x.json.checked: not a date: 'December'"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key(tmp_path: Path, change: Any, message: str) -> None:
    doc = _minimal()
    change(doc)
    with pytest.raises(SchemaError) as caught:
        load(_write(tmp_path, doc))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
