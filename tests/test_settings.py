"""Stack settings: every stack parses; a missing, malformed or out-of-grant key fails naming the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.kubernetes import K8sSettings
from components.settings import Settings, SettingsError, parse, raw_from_config

STACKS = Path(__file__).resolve().parent.parent / "stacks"
STACK_FILES = sorted(STACKS.glob("Pulumi.*.yaml"))


def raw_of(stack: str) -> dict[str, Any]:
    config = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {key.removeprefix("spot-eval:"): value for key, value in config.items()}


def parse_with(stack: str, **changes: Any) -> Settings:
    """Parse a stack's config with dotted-path changes (`node__market="on_demand"`; None deletes)."""
    raw = copy.deepcopy(raw_of(stack))
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = raw
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return parse(raw, stack=stack)


def rejects(stack: str, key: str, **changes: Any) -> str:
    with pytest.raises(SettingsError) as info:
        parse_with(stack, **changes)
    assert info.value.key == key, str(info.value)
    assert str(info.value).startswith(f"{key}: ")
    return str(info.value)


def test_there_is_one_stack_per_provider() -> None:
    providers = {raw_of(p.name[len("Pulumi.") : -len(".yaml")])["provider"] for p in STACK_FILES}
    assert providers == {"aws", "gcp", "azure", "k8s", "nebius", "runpod"}


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem)
def test_every_stack_file_parses_within_its_grant(path: Path) -> None:
    stack = path.name[len("Pulumi.") : -len(".yaml")]
    settings = parse(raw_of(stack), stack=stack)
    assert settings.stack == stack
    assert settings.region in settings.grant.regions
    assert settings.node.instance_type in settings.grant.instance_types
    assert settings.workload is not None and settings.workload.concurrency == settings.eval.concurrency
    if settings.node.max_price is not None:
        assert settings.grant.price_cap is not None and settings.node.max_price <= settings.grant.price_cap
    assert settings.stop.max_runtime_s is not None and settings.stop.idle_s is not None


def test_one_key_flips_the_market_and_drops_the_bid() -> None:
    spot = parse_with("aws-us-east-1")
    on_demand = parse_with("aws-us-east-1", node__market="on_demand")
    assert (spot.node.market, on_demand.node.market) == ("spot", "on_demand")
    assert spot.node.max_price == spot.grant.price_cap == 0.9
    assert on_demand.node.max_price is None
    assert on_demand.configured_price == 0.8048


def test_node_max_price_below_the_cap_is_the_bid() -> None:
    assert parse_with("aws-us-east-1", node__max_price=0.5).node.max_price == 0.5


def test_region_outside_the_grant_is_refused() -> None:
    message = rejects("aws-us-east-1", "region", region="us-west-2", zone="us-west-2a")
    assert "outside the grant" in message


def test_instance_type_outside_the_grant_is_refused() -> None:
    rejects("gcp-us-central1", "node.instance_type", node__instance_type="a3-highgpu-8g")


def test_max_price_above_the_cap_is_refused() -> None:
    message = rejects("aws-us-east-1", "node.max_price", node__max_price=1.5)
    assert "price_cap" in message


def test_a_bid_is_refused_where_the_provider_takes_none() -> None:
    message = rejects("gcp-us-central1", "node.max_price", node__max_price=0.5)
    assert "gcp takes no bid" in message
    rejects("k8s-gke", "node.max_price", node__max_price=0.5)


def test_bids_are_in_usd() -> None:
    message = rejects("aws-us-east-1", "grant.currency", grant__currency="EUR")
    assert "in USD" in message
    assert (
        parse_with("aws-us-east-1", grant__currency="EUR", node__market="on_demand").grant.currency == "EUR"
    )


def test_runpod_declares_on_demand_pods_only() -> None:
    assert "no spot capacity through its API" in rejects("runpod-eu", "node.market", node__market="spot")
    assert parse_with("runpod-eu", node__market=None).node.market == "on_demand"


def test_market_whose_price_is_above_the_cap_is_refused() -> None:
    message = rejects(
        "azure-eastus", "workload.prices.on_demand", node__market="on_demand", workload__prices__on_demand=0.9
    )
    assert "node.market" in message


def test_missing_required_keys_are_named() -> None:
    for key in ("provider", "region", "run_id", "node", "server", "eval", "grant"):
        rejects("aws-us-east-1", key, **{key: None})
    rejects("aws-us-east-1", "node.instance_type", node__instance_type=None)
    rejects("aws-us-east-1", "server.command", server__command=None)
    rejects("aws-us-east-1", "eval.command", eval__command=[])
    rejects("gcp-us-central1", "gcp.project", gcp__project=None)
    rejects("azure-eastus", "azure.resource_group", azure__resource_group=None)
    rejects("k8s-gke", "k8s.bucket_url", k8s__bucket_url=None)


def test_unknown_keys_are_named() -> None:
    rejects("aws-us-east-1", "node.instance_typ", node__instance_typ="g6.xlarge")
    rejects("aws-us-east-1", "colour", colour="blue")
    rejects("aws-us-east-1", "grant.budgett", grant__budgett=3)


def test_malformed_values_are_named() -> None:
    rejects("aws-us-east-1", "node.market", node__market="preemptible")
    rejects("aws-us-east-1", "node.count", node__count=-1)
    rejects("aws-us-east-1", "node.gpu_count", node__gpu_count="one")
    rejects("aws-us-east-1", "server.port", server__port=70000)
    rejects("aws-us-east-1", "server.health_path", server__health_path="health")
    rejects("aws-us-east-1", "run_id", run_id="Qwen_7B")
    rejects("aws-us-east-1", "provider", provider="openstack")
    rejects("aws-us-east-1", "node.ingress_cidrs", node__ingress_cidrs=["10.0.0.1/8"])
    rejects("aws-us-east-1", "stop.notify_emails", stop__notify_emails=["oncall"])
    rejects("aws-us-east-1", "grant.price_cap", grant__price_cap=0)
    rejects("aws-us-east-1", "eval.manifest", eval__manifest="../outside.jsonl")


def test_zone_must_belong_to_the_region() -> None:
    rejects("aws-us-east-1", "zone", zone="us-west-2a")
    rejects("gcp-us-central1", "zone", zone="us-east1-b")
    rejects("gcp-us-central1", "zone", zone=None)
    rejects("azure-eastus", "zone", zone="eastus-1")
    assert parse_with("k8s-gke").zone is None


def test_provider_images_are_checked() -> None:
    rejects("aws-us-east-1", "node.image", node__image="ubuntu-24.04")
    assert parse_with("aws-us-east-1", node__image="ami-0123456789abcdef0").node.image.startswith("ami-")
    rejects("azure-eastus", "node.image", node__image="ubuntu-hpc")


def test_another_providers_block_is_refused() -> None:
    message = rejects("aws-us-east-1", "gcp", gcp={"project": "some-project"})
    assert "provider is aws" in message


def test_stop_rules_cannot_exceed_the_grant() -> None:
    rejects("aws-us-east-1", "stop.max_runtime_hours", stop__max_runtime_hours=31)
    rejects("aws-us-east-1", "stop.idle_minutes", stop__idle_minutes=21)
    tighter = parse_with("aws-us-east-1", stop__max_runtime_hours=6, stop__idle_minutes=10)
    assert (tighter.stop.max_runtime_s, tighter.stop.idle_s) == (6 * 3600, 600)


def test_poweroff_is_refused_where_it_does_not_stop_the_bill() -> None:
    assert "billed" in rejects("azure-eastus", "stop.on_done", stop__on_done="poweroff")
    rejects("k8s-gke", "stop.on_done", stop__on_done="poweroff")
    assert parse_with("aws-us-east-1", stop__on_done=None).stop.on_done == "poweroff"
    assert parse_with("azure-eastus", stop__on_done=None).stop.on_done == "exit"


def test_a_budget_on_aws_or_azure_needs_alert_recipients() -> None:
    rejects("aws-us-east-1", "stop.notify_emails", stop__notify_emails=None)
    rejects("azure-eastus", "stop.notify_emails", stop__notify_emails=None)
    assert parse_with("gcp-us-central1", stop__notify_emails=None).stop.notify_emails == ()


def test_azure_single_vm_address_is_static() -> None:
    rejects("azure-eastus", "node.address", node__address="ephemeral")
    assert parse_with("azure-eastus").address_kind == "static"
    assert parse_with("azure-eastus", node__count=3).address_kind == "ephemeral"


def test_address_kind_follows_the_shape_of_the_node() -> None:
    assert parse_with("aws-us-east-1").address_kind == "ephemeral"
    assert parse_with("aws-us-east-1", node__address="static").address_kind == "static"
    assert parse_with("k8s-gke").address_kind == "static"
    rejects("gcp-us-central1", "node.address", node__count=2, node__address="static")


def test_a_static_address_the_provider_cannot_keep_is_refused_naming_the_key() -> None:
    assert "tied to its host" in rejects("runpod-eu", "node.address", node__address="static")
    assert parse_with("runpod-eu").address_kind == "ephemeral"
    # a pool on Azure with the key given: refused like everywhere else (a single VM's IP is static)
    assert "pool" in rejects("azure-eastus", "node.address", node__count=2, node__address="static")
    assert parse_with("azure-eastus", node__count=0, node__address="static").address_kind == "static"


def test_pool_instance_types_come_from_the_grant_ours_first() -> None:
    settings = parse_with("aws-us-east-1", node__instance_type="g5.xlarge", node__count=4)
    assert settings.node.pool
    assert settings.node.pool_instance_types == ("g5.xlarge", "g6.xlarge", "g6.2xlarge")


def test_k8s_flavour_and_names_are_checked() -> None:
    rejects("k8s-gke", "k8s.flavour", k8s__flavour="openshift")
    rejects("k8s-gke", "k8s.namespace", k8s__namespace="Spot_Eval")
    rejects("k8s-gke", "k8s.bucket_url", k8s__bucket_url="https://storage.googleapis.com/x")
    message = rejects("k8s-gke", "k8s.node_selector", k8s__flavour="nebius")
    assert "nebius" in message
    nebius = parse_with("k8s-gke", k8s__flavour="nebius", k8s__node_selector={"pool": "preemptible-l4"})
    assert nebius.block_of(K8sSettings).node_selector == {"pool": "preemptible-l4"}
    rejects("k8s-gke", "server.image", server__image=None)
    rejects("aws-us-east-1", "server.image", server__image="vllm/vllm-openai:v0.11.0")


def test_workload_is_checked_by_the_placement_parser_and_tied_to_the_stack() -> None:
    rejects("aws-us-east-1", "workload.restart.boot_minutes", workload__restart__boot_minutes=None)
    rejects("aws-us-east-1", "workload.episodes", workload__episodes=0)
    rejects("aws-us-east-1", "workload.concurrency", workload__concurrency=16)
    # concurrency per GPU: eval.concurrency (per node) is it times the node's GPUs
    per_gpu = {"workload__concurrency_per": "gpu", "workload__concurrency": 8, "node__gpu_count": 4}
    assert parse_with("aws-us-east-1", **per_gpu).workload is not None
    message = rejects("aws-us-east-1", "workload.concurrency", **{**per_gpu, "node__gpu_count": 2})
    assert message.startswith("workload.concurrency: 8 per GPU x 2 GPUs differs from eval.concurrency 32")
    # one grant: the block inherits spot-eval:grant and may not carry its own
    message = rejects("aws-us-east-1", "workload.grant", workload__grant__budget=40)
    assert "spot-eval:grant" in message and "spot-eval:workload.grant" in message
    inherited = parse_with("aws-us-east-1")
    assert inherited.workload is not None and inherited.workload.grant == inherited.grant
    assert parse_with("aws-us-east-1", workload=None).workload is None


def test_config_values_arrive_as_engine_text() -> None:
    raw = raw_from_config({"provider": "aws", "node": '{"market": "spot"}', "zone": None})
    assert raw == {"provider": "aws", "node": {"market": "spot"}}
    with pytest.raises(SettingsError) as info:
        raw_from_config({"node": "market: spot"})
    assert info.value.key == "node"


def test_every_provider_key_has_a_module_that_parses_its_block_and_builds() -> None:
    from components.registry import MODULES, provider_module
    from components.settings import CommonKeyRules
    from spoteval.providers import KEYS

    assert tuple(MODULES) == KEYS == ("aws", "gcp", "azure", "k8s", "nebius", "runpod")
    for key in KEYS:
        module = provider_module(key)
        assert callable(module.parse_settings) and callable(module.build), key
        assert isinstance(module.COMMON_RULES, CommonKeyRules), key
    with pytest.raises(KeyError):
        provider_module("local")
