"""Runpod offer prices from its REST API v2 catalog: the on-demand list price per GPU, now.

`RunpodApi.gpu_price` (`GET /v2/catalog/gpus/{id}`, the control plane's own read) gives the list
price per GPU-hour per cloud; the offer's price is the Secure Cloud one (the stack's pods mount a
network volume, which exists in Secure Cloud only) times its GPUs. The catalog prices per cloud, not
per data center: scope `global`; kind `current`; USD. Runpod offers no interruptible pods through any
current API (spoteval/providers.py), so a spot offer has no price. Needs `RUNPOD_API_KEY`.
"""

from __future__ import annotations

from collections.abc import Sequence

from spoteval.apis.runpod import GpuPrice, RunpodApi, RunpodError
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price
from spoteval.providers import RUNPOD

CLOUD = "SECURE"


class RunpodPrices:
    def __init__(self, api: RunpodApi | None = None) -> None:
        self.api = api

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        try:
            api = self.api or RunpodApi.from_env()
        except RunpodError as exc:
            raise PriceUnavailable(str(exc)) from None
        out: dict[Offer, Reading] = {}
        asked: dict[str, GpuPrice | None] = {}
        for offer in offers:
            if offer.market not in RUNPOD.markets:
                out[offer] = f"Runpod offers no {offer.market} pods through its API"
                continue
            gpus = offer.gpus or 1
            if offer.instance_type not in asked:
                try:
                    asked[offer.instance_type] = api.gpu_price(offer.instance_type)
                except RunpodError as exc:
                    raise PriceUnavailable(str(exc)) from None
            prices = asked[offer.instance_type]
            read_at = clock()
            if prices is None:
                out[offer] = f"Runpod has no GPU type {offer.instance_type!r}"
                continue
            per_gpu = prices.of(CLOUD)
            if per_gpu is None:
                out[offer] = f"Runpod gives no {CLOUD} price for {offer.instance_type} now"
                continue
            details = {"per_gpu": per_gpu, "gpus": gpus, "gpu_type": offer.instance_type, "cloud": CLOUD}
            out[offer] = OfferPrice(
                api_price(per_gpu * gpus, "USD", source_details=details),
                read_at,
                kind="current",
                scope="global",
                api="runpod rest v2 catalog/gpus price",
            )
        return out
