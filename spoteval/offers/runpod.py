"""Runpod offer prices from its GraphQL API: the minimum bid (spot) or on-demand price per GPU, now.

`RunpodApi.gpu_price` (the control plane's own query, `gpuTypes { lowestPrice(input: {gpuCount}) }`)
gives per GPU-hour prices for a GPU type and GPU count; the offer's price is that times its GPUs.
The query takes no data center, so the price is Runpod's lowest across its cloud: scope `global`
(the offer's region is where the stack would rent, not something the price depends on here); kind
`current`; USD. Needs `RUNPOD_API_KEY`.
"""

from __future__ import annotations

from collections.abc import Sequence

from spoteval.clouds.runpod import GpuPrice, RunpodApi, RunpodError
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price


class RunpodPrices:
    def __init__(self, api: RunpodApi | None = None) -> None:
        self.api = api

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        try:
            api = self.api or RunpodApi.from_env()
        except RunpodError as exc:
            raise PriceUnavailable(str(exc)) from None
        out: dict[Offer, Reading] = {}
        asked: dict[tuple[str, int], GpuPrice | None] = {}
        for offer in offers:
            gpus = offer.gpus or 1
            key = (offer.instance_type, gpus)
            if key not in asked:
                try:
                    asked[key] = api.gpu_price(offer.instance_type, gpus)
                except RunpodError as exc:
                    raise PriceUnavailable(str(exc)) from None
            prices = asked[key]
            read_at = clock()
            if prices is None:
                out[offer] = f"Runpod has no GPU type {offer.instance_type!r}"
                continue
            per_gpu = prices.minimum_bid if offer.market == "spot" else prices.on_demand
            if per_gpu is None:
                out[offer] = f"Runpod gives no {offer.market} price for {gpus} x {offer.instance_type} now"
                continue
            details = {"per_gpu": per_gpu, "gpus": gpus, "gpu_type": offer.instance_type}
            out[offer] = OfferPrice(
                api_price(per_gpu * gpus, "USD", source_details=details),
                read_at,
                kind="current",
                scope="global",
                api="runpod graphql gpuTypes.lowestPrice",
            )
        return out
