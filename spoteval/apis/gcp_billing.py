"""The Cloud Billing Catalog: Compute Engine SKUs, and the price of a machine shape from them.

A machine type has no SKU of its own: its price is its vCPUs x the family's core SKU + its GiB of
memory x the family's RAM SKU + each GPU x the GPU's SKU, for SKUs whose `serviceRegions` list the
region, each at its newest pricing's first tier. Spot and on-demand differ only in which SKU
descriptions count (`SPOT`, `ON_DEMAND`): "Spot Preemptible G2 Instance Core running in Americas"
against "G2 Instance Core running in Americas". The SKU list is paged (`pageToken`), needs an API
key, and is read in the asked currency.

https://docs.cloud.google.com/billing/v1/how-tos/catalog-api (checked 2026-12-02: an API key, at most
5000 SKUs a page, `pageToken` from `nextPageToken`, none on the last page)
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from spoteval.providers import GCP

assert GCP.price is not None and GCP.price.url is not None
#: the Cloud Billing Catalog and its Compute Engine service (spoteval/providers/gcp.py)
COMPUTE_SERVICE: Final = GCP.price.names["compute_service"]
CATALOG_URL: Final[str] = GCP.price.url
#: the most pages one listing reads
MAX_PAGES: Final = 1000
_GPU_NOISE: Final = frozenset({"nvidia", "tesla", "gpu", "amd"})

HttpGet = Callable[[str], Mapping[str, Any]]


def gpu_tokens(name: str) -> frozenset[str]:
    """A GPU name as a set of tokens, so `nvidia-tesla-t4` matches `Nvidia Tesla T4`."""
    return frozenset(t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t not in _GPU_NOISE)


def unit_price(sku: Mapping[str, Any]) -> tuple[float, str, str] | None:
    """(price per unit, currency, usage unit) of a Catalog SKU's newest pricing, first tier."""
    infos = sku.get("pricingInfo") or []
    if not infos:
        return None
    expression = infos[-1].get("pricingExpression") or {}
    rates = expression.get("tieredRates") or []
    if not rates:
        return None
    rate = min(rates, key=lambda r: float(r.get("startUsageAmount") or 0))
    money = rate.get("unitPrice") or {}
    value = int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    return value, str(money.get("currencyCode") or "USD"), str(expression.get("usageUnit") or "")


def skus(
    http_get: HttpGet,
    api_key: str,
    currency: str,
    error: type[Exception],
    *,
    catalog_url: str = CATALOG_URL,
    label: str = "Catalog",
) -> Iterator[Mapping[str, Any]]:
    """Every Compute Engine SKU, page after page; `error` (`{label}: ...`) for a malformed page."""
    token = ""
    base = catalog_url.rstrip("/")
    for _ in range(MAX_PAGES):
        query = {"key": api_key, "currencyCode": currency, "pageSize": "5000"}
        if token:
            query["pageToken"] = token
        page = http_get(f"{base}/{COMPUTE_SERVICE}/skus?{urllib.parse.urlencode(query)}")
        found = page.get("skus") or []
        if not isinstance(found, list):
            raise error(f"{label}: `skus` is not a list")
        yield from (s for s in found if isinstance(s, Mapping))
        token = str(page.get("nextPageToken") or "")
        if not token:
            return
    raise error(f"{label}: more than {MAX_PAGES} pages")


@dataclass(frozen=True)
class MachineShape:
    family: str
    vcpus: int
    memory_gib: float
    gpus: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Market:
    """Which SKU descriptions price one market: the core, RAM and GPU patterns (the GPU's name in
    the first named group that matched) and the words that rule a SKU out."""

    core: re.Pattern[str]
    ram: re.Pattern[str]
    gpu: re.Pattern[str]
    excluded: tuple[str, ...]


SPOT: Final = Market(
    core=re.compile(r"^Spot Preemptible (?P<family>\S+)(?: Predefined)? Instance Core running in "),
    ram=re.compile(r"^Spot Preemptible (?P<family>\S+)(?: Predefined)? Instance Ram running in "),
    gpu=re.compile(
        r"^(?:Spot Preemptible (?P<a>.+?) GPU running in "
        r"|(?P<b>.+?) GPU attached to Spot Preemptible VMs running in )"
    ),
    excluded=("Custom", "Sole Tenancy"),
)
ON_DEMAND: Final = Market(
    core=re.compile(r"^(?P<family>[A-Z0-9]+)(?: Predefined)? Instance Core running in "),
    ram=re.compile(r"^(?P<family>[A-Z0-9]+)(?: Predefined)? Instance Ram running in "),
    gpu=re.compile(r"^(?P<gpu>.+?) GPU running in "),
    excluded=("Custom", "Sole Tenancy", "Commitment", "Spot"),
)


@dataclass(frozen=True)
class ShapePrice:
    per_hour: float
    currency: str
    #: the descriptions of the SKUs that priced it, sorted
    skus: tuple[str, ...]


def _gpu_name(match: re.Match[str]) -> str:
    return next(v for v in match.groupdict().values() if v)


def shape_price(
    found: Iterable[Mapping[str, Any]], region: str, shape: MachineShape, market: Market
) -> ShapePrice | None:
    """The price of `shape` in `region` from Catalog SKUs, or None when a part has no SKU or the
    parts are priced in different currencies."""
    core: tuple[float, str] | None = None
    ram: tuple[float, str] | None = None
    gpu: dict[frozenset[str], tuple[float, str]] = {}
    used: list[str] = []
    wanted = {gpu_tokens(name) for name, _ in shape.gpus}
    for sku in found:
        if region not in (sku.get("serviceRegions") or []):
            continue
        description = str(sku.get("description") or "")
        if any(word in description for word in market.excluded):
            continue
        priced = unit_price(sku)
        if priced is None:
            continue
        value, currency, unit = priced
        if (m := market.core.match(description)) and m["family"].lower() == shape.family and unit == "h":
            core = (value, currency)
        elif (
            (m := market.ram.match(description))
            and m["family"].lower() == shape.family
            and unit.startswith("GiBy")
        ):
            ram = (value, currency)
        elif (m := market.gpu.match(description)) and unit == "h" and gpu_tokens(_gpu_name(m)) in wanted:
            gpu[gpu_tokens(_gpu_name(m))] = (value, currency)
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
    return ShapePrice(round(total, 6), currencies.pop(), tuple(sorted(set(used))))
