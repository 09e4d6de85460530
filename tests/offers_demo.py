"""The README's `--offers` example: every stack's offers priced by the loopback fakes of the tests.

    PYTHONPATH=$PWD venv/bin/python -m tests.offers_demo [--json] [--plot FILE.png] [more options]

Starts moto (EC2 spot price history), `tests/fake_prices.py` (the AWS Price List, the GCP Cloud
Billing Catalog, Azure Retail Prices) and `tests/fake_runpod.py` on loopback, points the price
readers at them through the environment, and runs `python -m scripts.placement --offers` over the
repository's stacks. No Nebius credentials are given, so Nebius is reported as unreachable.
`price_fakes()` gives the same servers and environment to a test (the README examples' `price-fakes`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence

from scripts import placement
from spoteval.offers.build import AZURE_PRICES_ENV, GCP_CATALOG_ENV
from spoteval.offers.gcp import KEY_ENV
from tests import servers
from tests.fake_prices import GCP_KEY, PriceApis
from tests.fake_runpod import FakeRunpod

STACKS = ("aws-us-east-1", "gcp-us-central1", "azure-eastus", "k8s-gke", "nebius-eu-north1", "runpod-eu")
TRACE = "aws:us-east-1:g5.xlarge=tests/data/traces/preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json"
#: variables the price fakes' environment removes (a Nebius token would reach the real API)
UNSET = ("NEBIUS_IAM_TOKEN",)


@contextlib.contextmanager
def price_fakes() -> Iterator[dict[str, str]]:
    """moto, the price API fakes and the Runpod fake on loopback; yields the environment that points
    every price reader at them (with an empty HOME: no Nebius CLI profile)."""
    moto, apis, runpod = servers.start_moto(), PriceApis(), FakeRunpod()
    runpod.prices["NVIDIA L40S"] = {"secure": 0.86, "community": 0.79}
    with tempfile.TemporaryDirectory(prefix="spoteval-offers-demo-") as home:
        try:
            yield {
                **moto.env,
                **runpod.env,
                "AWS_ENDPOINT_URL_PRICING": apis.url,
                KEY_ENV: GCP_KEY,
                GCP_CATALOG_ENV: f"{apis.url}/v1",
                AZURE_PRICES_ENV: f"{apis.url}/api/retail/prices",
                "HOME": home,
            }
        finally:
            apis.close()
            runpod.close()
            moto.stop()


def main(argv: Sequence[str] = ()) -> int:
    with price_fakes() as env:
        os.environ.update(env)
        for name in UNSET:
            os.environ.pop(name, None)
        stacks = [arg for name in STACKS for arg in ("--stack", name)]
        return placement.main(["--offers", *stacks, "--offer-trace", TRACE, *argv])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
