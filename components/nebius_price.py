"""The Nebius bid: a `BillingV1PricingPolicy` whose per-GPU `max_price` is the grant's price cap.

pulumi-nebius 0.6.73 (nebius.billing.v1 `MaxPriceV1.max_price`): "Per-GPU hourly limit in USD,
decimal string 3 digits precision"; a value below the current market price is accepted but blocks
scheduling; mutable only while `status.running_vm_count` is 0. The instance references the policy
by id (`spot_pricing_policy {id}`): "When the spot price exceeds that maximum price, the VM is
preempted". Without a cap the VM follows the spot price (no policy: "A VM without a policy is a
price-taker and pays the market price").
"""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal

import pulumi
import pulumi_nebius as nebius

from components.base import child
from components.settings import Settings
from spoteval.providers import nebius as facts


def max_price_per_gpu(cap_per_hour: float, gpus: int) -> str:
    """The node's cap per hour divided by its GPUs, rounded down to the provider's 3 decimals
    (never above the cap): 1.60 over 1 GPU -> "1.600", 1.00 over 3 GPUs -> "0.333"."""
    per_gpu = Decimal(str(cap_per_hour)) / Decimal(gpus)
    return str(per_gpu.quantize(Decimal(1).scaleb(-facts.MAX_PRICE_DECIMALS), rounding=ROUND_DOWN))


def pricing_policy(
    name: str, settings: Settings, project: str, parent: pulumi.Resource
) -> nebius.ComputeV1InstanceSpotPricingPolicyArgs | None:
    """The instance's `spot_pricing_policy` for a spot node with a cap, else None (follows the price)."""
    cap = settings.node.max_price
    if not settings.node.spot or cap is None:
        return None
    platform = settings.node.instance_type.partition("/")[0]
    policy = nebius.BillingV1PricingPolicy(
        f"{name}-price",
        parent_id=project,
        name=f"spot-eval-{settings.run_id}",
        labels=dict(settings.tags),
        compute_instance_spec=nebius.BillingV1PricingPolicyComputeInstanceSpecArgs(
            v1=nebius.BillingV1PricingPolicyComputeInstanceSpecV1Args(platform=platform)
        ),
        pricing=nebius.BillingV1PricingPolicyPricingArgs(
            max_price_v1=nebius.BillingV1PricingPolicyPricingMaxPriceV1Args(
                max_price=max_price_per_gpu(cap, facts.gpus_of(settings.node.instance_type))
            )
        ),
        opts=child(parent),
    )
    return nebius.ComputeV1InstanceSpotPricingPolicyArgs(id=policy.id)
