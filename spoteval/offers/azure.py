"""Azure offer prices from the Retail Prices API (no authentication), per region, in the asked currency.

The one Retail Prices query of the project (`spoteval.price`: `retail_prices_url`, `retail_items`,
`retail_price`, which the control plane and the node agent use too): spot offers ask for the VM
size's `Spot` meters and take the Linux one; on-demand offers ask for all its `Consumption` meters
and take the Linux one that is neither `Spot` nor `Low Priority`. Retail prices are the list price
in force now: kind `current`, scope `region`.
"""

from __future__ import annotations

from collections.abc import Sequence

from spoteval.clouds import ControlPlaneError, HttpGet, http_get_json
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price
from spoteval.price import AZURE_PRICES_URL, RetailPricesError, retail_items, retail_price, retail_prices_url


class AzurePrices:
    """Retail prices of Azure offers: one query per region, VM size and market."""

    def __init__(
        self, *, currency: str = "USD", prices_url: str = AZURE_PRICES_URL, http_get: HttpGet = http_get_json
    ) -> None:
        self.currency = currency
        self.prices_url = prices_url
        self.http_get = http_get

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        out: dict[Offer, Reading] = {}
        for offer in offers:
            sku, region, spot = offer.instance_type, offer.region, offer.market == "spot"
            url = retail_prices_url(self.prices_url, region, sku, spot_only=spot, currency=self.currency)
            try:
                items = [i for i in retail_items(url, self.http_get) if i.get("armSkuName") == sku]
                price = retail_price(items, spot=spot)
            except (ControlPlaneError, RetailPricesError) as exc:
                raise PriceUnavailable(f"Retail Prices: {exc}") from None
            if price is None or price.per_hour is None:
                out[offer] = f"no Linux {offer.market} meter for {sku} in {region}"
                continue
            out[offer] = OfferPrice(
                api_price(price.per_hour, price.currency, source_details=price.details),
                clock(),
                kind="current",
                scope="region",
                api="azure retail prices",
            )
        return out
