"""The Nebius bid rendered by the real program under Pulumi's mock engine: the grant's price cap is
the pricing policy's per-GPU `max_price` (rounded down to the provider's 3 decimals), referenced by
the preemptible VM; without a cap, or on demand, no policy (the VM follows the spot price)."""

from __future__ import annotations

import pytest

from components.nebius_price import max_price_per_gpu
from tests.test_stacks_nebius_runpod import INSTANCE, NEBIUS, nebius, variant

POLICY = "nebius:index/billingV1PricingPolicy:BillingV1PricingPolicy"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_the_grant_cap_is_the_per_gpu_max_price_and_the_vm_references_the_policy() -> None:
    r = nebius()
    policy = r.one(POLICY)
    assert policy.inputs == {
        "parentId": "project-e00spoteval0demo",
        "name": "spot-eval-qwen7b-drill-nebius",
        "labels": policy.inputs["labels"],
        "computeInstanceSpec": {"v1": {"platform": "gpu-h100-sxm"}},
        "pricing": {"maxPriceV1": {"maxPrice": "1.600"}},  # price_cap 1.60 over 1 GPU
    }
    vm = r.one(INSTANCE).inputs
    assert list(vm["spotPricingPolicy"]) == ["id"]
    assert vm["spotPricingPolicy"]["id"].startswith(policy.name)
    assert vm["preemptible"] == {"onPreemption": "STOP"}


def test_a_multi_gpu_preset_divides_the_cap_and_rounds_down() -> None:
    preset = "gpu-h100-sxm/8gpu-128vcpu-1600gb"
    r = variant(
        NEBIUS,
        node__instance_type=preset,
        node__gpu_count=8,
        grant__instance_types=[preset],
        grant__price_cap=10.0,
    )
    assert r.one(POLICY).inputs["pricing"] == {"maxPriceV1": {"maxPrice": "1.250"}}


def test_max_price_is_never_above_the_cap() -> None:
    assert max_price_per_gpu(1.0, 3) == "0.333"
    assert max_price_per_gpu(2.0, 3) == "0.666"
    assert max_price_per_gpu(1.6, 1) == "1.600"
    assert max_price_per_gpu(0.0019, 1) == "0.001"


def test_on_demand_declares_no_policy() -> None:
    r = variant(NEBIUS, node__market="on_demand", grant__price_cap=3.0)
    assert r.of_type(POLICY) == []
    assert "spotPricingPolicy" not in r.one(INSTANCE).inputs
