"""The `workload:` block of a stack: the placement's input, tied to the run the stack declares.

The block is parsed by the placement's own parser (spoteval.placement) and must describe this
stack's run (its concurrency is the eval's, its price on the node's market within the grant's cap).
It inherits the stack's one grant, `spot-eval:grant`: a `grant:` of its own is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from components.setting_errors import SettingsError
from spoteval.grant import Grant

if TYPE_CHECKING:
    from spoteval.placement import Workload


def parse_workload_block(
    raw: Mapping[str, Any], *, provider: str, market: str, gpu_count: int, concurrency: int, grant: Grant
) -> Workload:
    """Validate the placement's block with the placement's own parser, then what ties it to this
    stack: its concurrency is the eval's (`concurrency`, per GPU x `gpu_count` with
    `concurrency_per: gpu`), its price on the node's `market` is within the grant's cap.

    A stack has one grant: the block inherits `grant` and may not carry its own (the placement's
    own refusal, spoteval.placement.inputs.SECOND_GRANT), and leaves out the options the stack
    cannot declare (`Workload.left_out`), as the placement over the stack does."""
    from spoteval.placement import PlacementError, parse_workload
    from spoteval.placement.inputs import SECOND_GRANT, stack_left_out

    if raw.get("grant") is not None:
        raise SettingsError("workload.grant", SECOND_GRANT)
    try:
        workload = replace(
            parse_workload(raw, where="workload"),
            grant=grant,
            left_out=tuple(stack_left_out({"provider": provider}, raw).items()),
        )
    except PlacementError as exc:
        raise SettingsError(exc.key, exc.problem) from None
    per_gpu = workload.concurrency_per == "gpu"
    if workload.concurrency * (gpu_count if per_gpu else 1) != concurrency:
        per = f" per GPU x {gpu_count} GPUs" if per_gpu else ""
        raise SettingsError(
            "workload.concurrency",
            f"{workload.concurrency}{per} differs from eval.concurrency {concurrency}: "
            "the placement would describe another run",
        )
    price = workload.prices.of(market)
    if grant.price_cap is not None and price is not None and price > grant.price_cap:
        raise SettingsError(
            f"workload.prices.{market}",
            f"{price} per node-hour on the {market} market (node.market) is above the grant's "
            f"price_cap {grant.price_cap}",
        )
    return workload
