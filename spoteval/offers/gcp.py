"""GCP offer prices from the Cloud Billing Catalog: Compute Engine SKUs, per region, in the asked currency.

A machine type has no SKU of its own: its price is its vCPUs x the family's core SKU + its GiB x the
family's RAM SKU + its GPUs x the GPU SKU, for SKUs whose `serviceRegions` list the region (vCPUs,
memory and GPUs from `spoteval.offers.instances`). Spot offers use the `Preemptible` SKUs through
`spoteval.clouds.gcp.catalog_price` ("Spot Preemptible G2 Instance Core running in Americas");
on-demand offers the `OnDemand` ones ("G2 Instance Core running in Americas", "Nvidia L4 GPU running
in Americas"). Catalog prices are list prices in force now (spot prices change at most once a
month), so the kind is `current`, the scope `region`. The Catalog needs an API key
(`SPOTEVAL_GCP_BILLING_API_KEY`, as for the restart measurement).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from spoteval.clouds import ControlPlaneError, HttpGet, Price, http_get_json
from spoteval.clouds.gcp import (
    CATALOG_URL,
    COMPUTE_SERVICE,
    MachineShape,
    catalog_price,
    gpu_tokens,
    unit_price,
)
from spoteval.offers.instances import shape_of
from spoteval.offers.prices import Clock, Offer, OfferPrice, PriceUnavailable, Reading, api_price

KEY_ENV: Final = "SPOTEVAL_GCP_BILLING_API_KEY"
_CORE = re.compile(r"^(?P<family>[A-Z0-9]+)(?: Predefined)? Instance Core running in ")
_RAM = re.compile(r"^(?P<family>[A-Z0-9]+)(?: Predefined)? Instance Ram running in ")
_GPU = re.compile(r"^(?P<gpu>.+?) GPU running in ")


def on_demand_catalog_price(
    skus: Iterable[Mapping[str, Any]], region: str, shape: MachineShape
) -> Price | None:
    """The on-demand price of `shape` in `region` from `OnDemand` Catalog SKUs, or None when a part
    has no SKU (the counterpart of `spoteval.clouds.gcp.catalog_price` for spot)."""
    core = ram = None
    gpu: dict[frozenset[str], tuple[float, str]] = {}
    wanted = {gpu_tokens(name) for name, _ in shape.gpus}
    used: list[str] = []
    for sku in skus:
        description = str(sku.get("description") or "")
        if region not in (sku.get("serviceRegions") or []) or "Custom" in description:
            continue
        if "Sole Tenancy" in description or "Commitment" in description or "Spot" in description:
            continue
        priced = unit_price(sku)
        if priced is None:
            continue
        value, currency, unit = priced
        if (m := _CORE.match(description)) and m["family"].lower() == shape.family and unit == "h":
            core = (value, currency)
        elif (
            (m := _RAM.match(description)) and m["family"].lower() == shape.family and unit.startswith("GiBy")
        ):
            ram = (value, currency)
        elif (m := _GPU.match(description)) and unit == "h" and gpu_tokens(m["gpu"]) in wanted:
            gpu[gpu_tokens(m["gpu"])] = (value, currency)
        else:
            continue
        used.append(description)
    if core is None or ram is None or any(gpu_tokens(n) not in gpu for n, _ in shape.gpus):
        return None
    currencies = {core[1], ram[1], *(c for _, c in gpu.values())}
    if len(currencies) != 1:
        return None
    total = shape.vcpus * core[0] + shape.memory_gib * ram[0]
    total += sum(count * gpu[gpu_tokens(name)][0] for name, count in shape.gpus)
    return Price(round(total, 6), currencies.pop(), "api", {"skus": sorted(set(used)), "region": region})


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
        token = ""
        for _ in range(1000):
            query = {"key": self.api_key or "", "currencyCode": self.currency, "pageSize": "5000"}
            if token:
                query["pageToken"] = token
            url = f"{self.catalog_url}/{COMPUTE_SERVICE}/skus?{urllib.parse.urlencode(query)}"
            page = self.http_get(url)
            skus = page.get("skus") or []
            if not isinstance(skus, list):
                raise PriceUnavailable("Catalog: `skus` is not a list")
            yield from (s for s in skus if isinstance(s, Mapping))
            token = str(page.get("nextPageToken") or "")
            if not token:
                return
        raise PriceUnavailable("Catalog: more than 1000 pages")

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
