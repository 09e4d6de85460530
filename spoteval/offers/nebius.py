"""Nebius offer prices: the current spot price per platform and region from `SpotPriceService.List`.

The control plane's own reader (`spoteval.clouds.nebius.spot_price`: the SKU's price per unit,
times the preset's GPUs when the unit is a GPU-hour) over every page of the public, unauthenticated
`nebius.billing.v1alpha1.SpotPriceService.List`. Kind `current`, scope `region`, in the currency the
API names.

On-demand: Nebius publishes no unauthenticated on-demand price list through its API; its
`billing.v1alpha1.CalculatorService.Estimate` prices a full instance spec for a signed-in project.
On-demand offers are therefore reported without a price (the reason says so), never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from spoteval.clouds.nebius import spot_price
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price

CALL_TIMEOUT_S: Final = 30.0
ON_DEMAND_REASON: Final = (
    "Nebius has no public on-demand price API (billing.v1alpha1.CalculatorService.Estimate needs a "
    "signed-in project): not read, so not ranked"
)


def _default_sdk() -> Any:
    import os

    from nebius.sdk import SDK

    from spoteval.clouds.nebius import TOKEN_ENV, USER_AGENT

    token = os.environ.get(TOKEN_ENV)
    if token:
        return SDK(credentials=token, user_agent_prefix=USER_AGENT)
    from nebius.aio.cli_config import Config

    try:
        return SDK(config_reader=Config(), user_agent_prefix=USER_AGENT)
    except Exception as exc:  # the SDK's config reader raises its own types: say what is missing
        raise PriceUnavailable(f"no credentials ({TOKEN_ENV}, or a Nebius CLI profile): {exc}") from None


class NebiusPrices:
    def __init__(self, sdk: Callable[[], Any] = _default_sdk) -> None:
        self.sdk = sdk

    def _items(self) -> list[Any]:
        import grpc  # type: ignore[import-untyped,unused-ignore]
        from nebius.api.nebius.billing.v1alpha1 import ListSpotPricesRequest, SpotPriceServiceClient
        from nebius.base.error import SDKError

        sdk = self.sdk()
        try:
            client = SpotPriceServiceClient(sdk)
            items: list[Any] = []
            token = ""
            for _ in range(100):
                request = ListSpotPricesRequest(page_size=1000, page_token=token)
                page = client.list(request, timeout=CALL_TIMEOUT_S).wait()
                items.extend(page.items)
                token = page.next_page_token
                if not token:
                    return items
        except (ImportError, SDKError, grpc.RpcError, OSError, TimeoutError, ValueError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PriceUnavailable(f"SpotPriceService.List: {text}") from None
        raise PriceUnavailable("SpotPriceService.List: more than 100 pages")

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        out: dict[Offer, Reading] = {o: ON_DEMAND_REASON for o in offers if o.market != "spot"}
        spot = [o for o in offers if o.market == "spot"]
        if not spot:
            return out
        try:
            items = self._items()
        except PriceUnavailable as exc:
            return {**out, **{o: f"nebius price API unavailable: {exc}" for o in spot}}
        read_at = clock()
        for offer in spot:
            platform = offer.instance_type.split("/", 1)[0]
            price = spot_price(items, offer.region, platform, offer.gpus or 1)
            if price is None or price.per_hour is None:
                out[offer] = f"no single spot price for {platform} in {offer.region}"
                continue
            out[offer] = OfferPrice(
                api_price(price.per_hour, price.currency, source_details=price.details),
                read_at,
                kind="current",
                scope="region",
                api="nebius.billing.v1alpha1.SpotPriceService.List",
            )
        return out
