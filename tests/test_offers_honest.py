"""`--offers` is honest about prices: each market's price is read and reported on its own, a failed read
is one line naming the API that failed and the fix (no HTML), and "nothing could be priced" is its own
answer and exit code (4), apart from "nothing fits the grant" (3).

Before: one failed call blanked every offer of the provider under the other API's name; against
moto (which has no Price List API) every spot row read `Price List API GetProducts: 500:
<!doctype html>...`; and nothing priced was `Answer: none ... within the grant`, exit 3.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scripts import placement as cli
from spoteval.offers.aws import AwsPrices
from spoteval.offers.failures import clean, explain
from spoteval.offers.prices import Offer, OfferPrice, read_prices
from tests import servers
from tests.fake_prices import PriceApis

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
SPOT = Offer("aws", "us-east-1", "g6.xlarge", "spot", 1)
DEMAND = Offer("aws", "us-east-1", "g6.xlarge", "on_demand", 1)


def clock() -> datetime:
    return NOW


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere (no profile, no instance metadata), endpoints on a closed port."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://127.0.0.1:9")


@pytest.fixture
def moto_only(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto for everything AWS: it serves the spot price history, and answers the Price List with a
    500 and an HTML page (it does not implement that API)."""
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", moto_server.url)
    yield


def test_a_failed_on_demand_read_leaves_the_spot_price_standing(moto_only: None) -> None:
    got = read_prices([SPOT, DEMAND], {"aws": AwsPrices()}, clock)
    spot = got[SPOT]
    assert isinstance(spot, OfferPrice) and spot.per_hour == pytest.approx(0.00001)
    demand = got[DEMAND]
    assert isinstance(demand, str)
    assert demand.startswith(
        "AWS Price List GetProducts failed: HTTP 500, an HTML page instead of the API's answer"
    )
    assert demand.endswith(f"; check the endpoint: AWS_ENDPOINT_URL_PRICING (now {moto_server_url()})")
    assert "<" not in demand and "\n" not in demand


def moto_server_url() -> str:
    return os.environ["AWS_ENDPOINT_URL_PRICING"]


def test_the_endpoint_named_is_the_one_in_force() -> None:
    html = "Price List API GetProducts: 500: <!doctype html><html></html>"
    head = (
        "AWS Price List GetProducts failed: HTTP 500, an HTML page instead of the API's answer; "
        "check the endpoint: "
    )
    assert explain("aws", "on_demand", html, {}) == head + "AWS_ENDPOINT_URL_PRICING (unset: AWS itself)"
    wide = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}
    assert explain("aws", "on_demand", html, wide) == (
        head + "AWS_ENDPOINT_URL_PRICING (now AWS_ENDPOINT_URL=http://127.0.0.1:5000)"
    )
    both = {**wide, "AWS_ENDPOINT_URL_PRICING": "http://127.0.0.1:6000"}
    assert (
        explain("aws", "on_demand", html, both)
        == head + "AWS_ENDPOINT_URL_PRICING (now http://127.0.0.1:6000)"
    )
    refused = "Retail Prices: GET http://127.0.0.1:9/x: [Errno 111] Connection refused"
    assert explain("azure", "spot", refused, {"SPOTEVAL_AZURE_PRICES_URL": "http://127.0.0.1:9/x"}).endswith(
        "; check the endpoint: SPOTEVAL_AZURE_PRICES_URL (now http://127.0.0.1:9/x)"
    )


def test_offline_each_market_names_its_own_api_and_the_credentials(no_aws_credentials: None) -> None:
    got = read_prices([SPOT, DEMAND], {"aws": AwsPrices()}, clock)
    credentials = "AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    assert got[SPOT] == (
        "EC2 DescribeSpotPriceHistory failed: Unable to locate credentials; check the "
        f"credentials: {credentials}"
    )
    assert got[DEMAND] == (
        "AWS Price List GetProducts failed: Unable to locate credentials; check the "
        f"credentials: {credentials}"
    )


def test_the_wording_of_a_failure_drops_html_and_names_the_fix() -> None:
    page = (
        "Price List API GetProducts: 500: <!doctype html>\n<html lang=en>\n"
        "<title>500 Internal Server Error</title>"
    )
    assert clean(page) == "HTTP 500, an HTML page instead of the API's answer"
    assert explain("gcp", "spot", "Cloud Billing Catalog: GET https://x/v1: HTTP 403: API key not valid") == (
        "GCP Cloud Billing Catalog failed: GET https://x/v1: HTTP 403: API key not valid; check the "
        "credentials: an API key in SPOTEVAL_GCP_BILLING_API_KEY"
    )
    assert explain("runpod", "on_demand", "RUNPOD_API_KEY is not set (the Runpod API key)") == (
        "Runpod REST v2 catalog failed: RUNPOD_API_KEY is not set (the Runpod API key)"
    )
    refused = explain(
        "azure", "spot", "Retail Prices: GET http://127.0.0.1:9/x: [Errno 111] Connection refused", {}
    )
    assert refused.endswith(
        "; check the endpoint: SPOTEVAL_AZURE_PRICES_URL (unset: the public Retail Prices API)"
    )


def test_nothing_priced_is_its_own_answer_exit_4_and_writes_no_plot(
    no_aws_credentials: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "offers.png"
    assert cli.main(["--offers", "--stack", "aws-us-east-1", "--runs", "50", "--plot", str(png)]) == 4
    captured = capsys.readouterr()
    assert captured.out.rstrip().endswith(
        "Answer: nothing could be priced: no offer's price could be read (the reasons are above), so "
        "nothing was compared with the grant."
    )
    assert "plot written" not in captured.out and not png.exists()
    assert captured.err == f"placement: --plot {png}: not written: no offer has a price to plot\n"


def test_nothing_within_the_grant_is_exit_3(
    moto_only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    apis = PriceApis()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", apis.url)
        stacks = tmp_path / "stacks"
        stacks.mkdir()
        text = (Path(__file__).resolve().parent.parent / "stacks" / "Pulumi.aws-us-east-1.yaml").read_text()
        text = text.replace(
            "instance_types: [g6.xlarge, g6.2xlarge, g5.xlarge]", "instance_types: [g6.xlarge]"
        )
        # spot (13.4 h) misses a 13 h deadline; on-demand (0.805 per hour) is above a 0.5 cap
        text = text.replace("deadline_hours: 30", "deadline_hours: 13").replace(
            "price_cap: 0.90", "price_cap: 0.5"
        )
        (stacks / "Pulumi.aws-us-east-1.yaml").write_text(text)
        code = cli.main(["--offers", "--stack", "aws-us-east-1", "--stacks-dir", str(stacks), "--runs", "50"])
        out = capsys.readouterr().out
        assert code == 3, out
        assert (
            "Answer: none: no offer is eligible, so there is nowhere to run this workload within the grant."
            in out
        )
    finally:
        apis.close()
