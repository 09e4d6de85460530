"""GCP offer prices from the Cloud Billing Catalog: Compute Engine SKUs, per region, in the asked currency.

A machine type has no SKU of its own: its price is its vCPUs x the family's core SKU + its GiB x the
family's RAM SKU + its GPUs x the GPU SKU, for SKUs whose `serviceRegions` list the region (vCPUs,
memory and GPUs from `spoteval.offers.instances`), read and priced by `spoteval.apis.gcp_billing`.
Spot offers use the `Preemptible` SKUs ("Spot Preemptible G2 Instance Core running in Americas");
on-demand offers the `OnDemand` ones ("G2 Instance Core running in Americas", "Nvidia L4 GPU
running in Americas"). Catalog prices are list prices in force now (spot prices change at most
once a month), so the kind is `current`, the scope `region`. The Catalog needs an API key
(`SPOTEVAL_GCP_BILLING_API_KEY`, as for the restart measurement).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from spoteval.apis import gcp_billing
from spoteval.apis.gcp_billing import CATALOG_URL, ON_DEMAND, MachineShape, shape_price
from spoteval.clouds import ControlPlaneError, HttpGet, Price, http_get_json
from spoteval.clouds.gcp import catalog_price
from spoteval.offers.instances import shape_of
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price

KEY_ENV: Final = "SPOTEVAL_GCP_BILLING_API_KEY"


def on_demand_catalog_price(
    skus: Iterable[Mapping[str, Any]], region: str, shape: MachineShape
) -> Price | None:
    """The on-demand price of `shape` in `region` from `OnDemand` Catalog SKUs, or None when a part
    has no SKU (the counterpart of `spoteval.clouds.gcp.catalog_price` for spot)."""
    found = shape_price(skus, region, shape, ON_DEMAND)
    if found is None:
        return None
    return Price(found.per_hour, found.currency, "api", {"skus": list(found.skus), "region": region})


def machine_shape(instance_type: str) -> MachineShape | None:
    """The Catalog's view of a machine type (family, vCPUs, GiB, GPUs), from the instances table."""
    shape = shape_of("gcp", instance_type)
    if shape is None:
        return None
    family = instance_type.split("-", 1)[0].lower()
    return MachineShape(family, shape.vcpus, shape.memory_gib, ((shape.gpu, shape.gpus),))


class GcpPrices:
    """Catalog prices of GCP offers; one pass over the Compute Engine SKUs for all of them."""

    def __init__(
        self,
        api_key: str | None,
        *,
        currency: str = "USD",
        catalog_url: str = CATALOG_URL,
        http_get: HttpGet = http_get_json,
    ) -> None:
        self.api_key = api_key
        self.currency = currency
        self.catalog_url = catalog_url.rstrip("/")
        self.http_get = http_get

    def _skus(self) -> Iterator[Mapping[str, Any]]:
        return gcp_billing.skus(
            self.http_get, self.api_key or "", self.currency, PriceUnavailable, catalog_url=self.catalog_url
        )

    def read(self, offers: Sequence[Offer], clock: Clock) -> dict[Offer, Reading]:
        if not self.api_key:
            raise PriceUnavailable(f"the Cloud Billing Catalog needs an API key ({KEY_ENV})")
        try:
            skus = list(self._skus())
        except ControlPlaneError as exc:
            raise PriceUnavailable(f"Cloud Billing Catalog: {exc}") from None
        read_at = clock()
        by_usage: dict[str, list[Mapping[str, Any]]] = {}
        for sku in skus:
            by_usage.setdefault(str((sku.get("category") or {}).get("usageType")), []).append(sku)
        out: dict[Offer, Reading] = {}
        for offer in offers:
            shape = machine_shape(offer.instance_type)
            if shape is None:
                out[offer] = f"machine type {offer.instance_type} is not in spoteval/offers/instances.py"
                continue
            if offer.market == "spot":
                price = catalog_price(by_usage.get("Preemptible", []), offer.region, shape)
            else:
                price = on_demand_catalog_price(by_usage.get("OnDemand", []), offer.region, shape)
            if price is None or price.per_hour is None:
                out[offer] = (
                    f"the Catalog has no complete {offer.market} price for {offer.instance_type} "
                    f"in {offer.region}"
                )
                continue
            out[offer] = OfferPrice(
                api_price(price.per_hour, price.currency, source_details=price.details),
                read_at,
                kind="current",
                scope="region",
                api="cloudbilling:services.skus.list",
            )
        return out
