"""From stacks to a ranking: each stack's offers, each provider's price reader, tau and S per offer.

    stacks = [read_stack("aws-us-east-1", Path("stacks")), read_stack("runpod-eu", Path("stacks"))]
    ranking = offers_ranking(stacks, workload=None, readers=default_readers(stacks))

A stack gives its provider, region, zone, instance type, GPU count, grant and (unless a workload
file is given for all of them) the workload its offers are ranked under. The markets of an offer are
those the stack may declare (`spoteval.stack.market_refusal`, the settings' own rule), and its
workload is its `spot-eval:workload` block under its one grant, `spot-eval:grant`.
Nothing is started: only prices are read, by the readers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spoteval.grant import Grant
from spoteval.offers.evidence import Measured, OfferKey, from_trace
from spoteval.offers.prices import MARKETS, Clock, PriceReader, read_prices, utc_now
from spoteval.offers.rank import Candidate, Ranking, rank_offers, stack_candidates
from spoteval.placement import CONCURRENCY_PER, PlacementError, Workload
from spoteval.placement.inputs import read_stack_settings, stack_grant, stack_workload
from spoteval.providers import Lacks, UnknownProvider, provider
from spoteval.stack import declarable_markets

#: where the GCP Catalog and Azure Retail Prices are asked (a test points them at a loopback fake;
#: AWS endpoints come from boto3's own `AWS_ENDPOINT_URL_*`, Runpod's from `RUNPOD_REST_URL`)
GCP_CATALOG_ENV: Final = "SPOTEVAL_GCP_CATALOG_URL"
AZURE_PRICES_ENV: Final = "SPOTEVAL_AZURE_PRICES_URL"
WORKLOAD_KEY: Final = "spot-eval:workload"


@dataclass(frozen=True)
class StackOffers:
    """What one stack contributes to the offers."""

    name: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    gpu_count: int | None
    grant: Grant
    workload: Workload | None

    @property
    def markets(self) -> tuple[str, ...]:
        """The markets this stack may declare (the settings' own rule, spoteval.stack.market_refusal)."""
        return tuple(m for m in declarable_markets(self.provider) if m in MARKETS)


def stack_offers(name: str, settings: Mapping[str, Any]) -> StackOffers:
    """A stack's part in the offers, from its `spot-eval:*` settings (without the namespace)."""
    where = f"stack {name}"

    def text(raw: Mapping[str, Any], key: str, path: str) -> str:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise PlacementError(f"{where}: spot-eval:{path}", f"missing or not a name: {value!r}")
        return value

    node = settings.get("node")
    if not isinstance(node, Mapping):
        raise PlacementError(f"{where}: spot-eval:node", "missing: the stack declares no node")
    gpus = node.get("gpu_count")
    grant = stack_grant(settings, f"{where}: ")
    loaded = stack_workload(name, settings, where, where=f"{where}: ")
    workload = loaded.parse() if loaded is not None else None
    zone = settings.get("zone")
    return StackOffers(
        name=name,
        provider=text(settings, "provider", "provider"),
        region=text(settings, "region", "region"),
        zone=zone if isinstance(zone, str) and zone else None,
        instance_type=text(node, "instance_type", "node.instance_type"),
        gpu_count=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else None,
        grant=grant,
        workload=workload,
    )


def read_stack(name: str, stacks_dir: Path | None) -> StackOffers:
    """`stacks_dir/Pulumi.NAME.yaml` as offers (the file is only read)."""
    _, settings = read_stack_settings(name, stacks_dir)
    return stack_offers(name, settings)


ReaderFactory = Callable[[Sequence["StackOffers"], Mapping[str, str], str], PriceReader]


def _aws(stacks: Sequence[StackOffers], env: Mapping[str, str], currency: str) -> PriceReader:
    from spoteval.offers.aws import AwsPrices

    return AwsPrices(zones={s.region: s.zone for s in stacks if s.zone})


def _gcp(stacks: Sequence[StackOffers], env: Mapping[str, str], currency: str) -> PriceReader:
    from spoteval.clouds.gcp import CATALOG_URL
    from spoteval.offers.gcp import KEY_ENV, GcpPrices

    return GcpPrices(
        env.get(KEY_ENV) or None, currency=currency, catalog_url=env.get(GCP_CATALOG_ENV) or CATALOG_URL
    )


def _azure(stacks: Sequence[StackOffers], env: Mapping[str, str], currency: str) -> PriceReader:
    from spoteval.offers.azure import AzurePrices
    from spoteval.price import AZURE_PRICES_URL

    return AzurePrices(currency=currency, prices_url=env.get(AZURE_PRICES_ENV) or AZURE_PRICES_URL)


def _runpod(stacks: Sequence[StackOffers], env: Mapping[str, str], currency: str) -> PriceReader:
    from spoteval.offers.runpod import RunpodPrices

    return RunpodPrices()


def _nebius(stacks: Sequence[StackOffers], env: Mapping[str, str], currency: str) -> PriceReader:
    from spoteval.offers.nebius import NebiusPrices

    return NebiusPrices()


#: provider key -> the factory of its price reader (from its stacks, the environment, the currency
#: of its grants); a provider whose `PRICE` is a named none (spoteval/providers/) has none
PRICE_READERS: Final[Mapping[str, ReaderFactory]] = {
    "aws": _aws,
    "gcp": _gcp,
    "azure": _azure,
    "runpod": _runpod,
    "nebius": _nebius,
}


def default_readers(
    stacks: Sequence[StackOffers], env: Mapping[str, str] | None = None
) -> dict[str, PriceReader]:
    """One reader per provider of the stacks, set up from the environment and the stacks' grants;
    none for a provider without a price API (its offers get the reason)."""
    env = os.environ if env is None else env
    currency = {s.provider: s.grant.currency for s in stacks}
    readers: dict[str, PriceReader] = {}
    for key, money in currency.items():
        try:
            lacks = isinstance(provider(key).PRICE, Lacks)
        except UnknownProvider as exc:
            raise PlacementError("provider", str(exc)) from None
        if lacks:
            continue
        make = PRICE_READERS.get(key)
        if make is None:
            raise PlacementError("provider", f"{key}: its price API has no reader in spoteval/offers/")
        readers[key] = make([s for s in stacks if s.provider == key], env, money)
    return readers


def parse_offer_trace(text: str) -> tuple[OfferKey, str]:
    """`PROVIDER:REGION:INSTANCE_TYPE=FILE` (as `--offer-trace` takes it)."""
    key, sep, path = text.partition("=")
    parts = key.split(":", 2)
    if not sep or not path or len(parts) != 3 or not all(parts):
        raise PlacementError("--offer-trace", f"expected PROVIDER:REGION:INSTANCE_TYPE=FILE, got {text!r}")
    return (parts[0], parts[1], parts[2]), path


def offers_ranking(
    stacks: Sequence[StackOffers],
    workload: Workload | None,
    *,
    readers: Mapping[str, PriceReader],
    traces: Sequence[tuple[OfferKey, str]] = (),
    run: Mapping[OfferKey, Measured] | None = None,
    concurrency_per: str | None = None,
    runs: int = 2000,
    seed: int = 1,
    clock: Clock = utc_now,
) -> Ranking:
    """Read every stack's offers' prices now and rank them (see `spoteval.offers.rank`)."""
    if not stacks:
        raise PlacementError(
            "--offers", "needs at least one --stack NAME (the stacks name the grant's offers)"
        )
    if concurrency_per is not None and concurrency_per not in CONCURRENCY_PER:
        raise PlacementError("--concurrency-per", f"must be one of {', '.join(CONCURRENCY_PER)}")
    candidates: list[Candidate] = []
    for stack in stacks:
        base = workload or stack.workload
        if base is None:
            raise PlacementError(
                f"stack {stack.name}: {WORKLOAD_KEY}", "missing: give a WORKLOAD file for its offers"
            )
        candidates += stack_candidates(
            stack=stack.name,
            provider=stack.provider,
            region=stack.region,
            instance_type=stack.instance_type,
            grant=stack.grant,
            workload=base,
            gpu_count=stack.gpu_count,
            markets=stack.markets,
        )
    unique = list({c.offer: c for c in candidates}.values())
    known = {(c.offer.provider, c.offer.region, c.offer.instance_type) for c in unique}
    for key, path in traces:
        if key not in known:
            raise PlacementError("--offer-trace", f"{':'.join(key)} is not an offer of the stacks ({path})")
    measured: dict[str, Mapping[OfferKey, Measured]] = {
        "trace": {key: from_trace(path) for key, path in traces}
    }
    if run:
        measured["run"] = run
    readings = read_prices([c.offer for c in unique], readers, clock)
    return rank_offers(
        unique, readings, measured=measured, concurrency_per=concurrency_per, runs=runs, seed=seed
    )
