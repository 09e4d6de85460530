"""The offers of the repository's stacks, priced by moto and the loopback fakes of every price API, through
the library and through `python -m scripts.placement --offers` (the table, `--json`, `--plot`, exit codes,
bad input)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from scripts import placement as cli
from spoteval.offers.build import (
    AZURE_PRICES_ENV,
    GCP_CATALOG_ENV,
    default_readers,
    offers_ranking,
    read_stack,
)
from spoteval.offers.gcp import KEY_ENV
from spoteval.offers.nebius import ON_DEMAND_REASON
from spoteval.offers.prices import NO_PRICE_API
from spoteval.offers.rank import Ranking
from spoteval.offers.render import text_lines
from tests import servers
from tests.fake_prices import GCP_KEY, PriceApis
from tests.fake_runpod import FakeRunpod

STACKS = Path(__file__).resolve().parent.parent / "stacks"
NAMES = ("aws-us-east-1", "gcp-us-central1", "azure-eastus", "k8s-gke", "nebius-eu-north1", "runpod-eu")
NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)


@pytest.fixture
def price_world(
    moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[PriceApis]:
    apis, runpod = PriceApis(), FakeRunpod()
    runpod.prices["NVIDIA L40S"] = {"secure": 0.86, "community": 0.79}
    env = {
        **moto_server.env,
        **runpod.env,
        "AWS_ENDPOINT_URL_PRICING": apis.url,
        KEY_ENV: GCP_KEY,
        GCP_CATALOG_ENV: f"{apis.url}/v1",
        AZURE_PRICES_ENV: f"{apis.url}/api/retail/prices",
        "HOME": str(tmp_path),  # no Nebius CLI profile: Nebius cannot be asked
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NEBIUS_IAM_TOKEN", raising=False)
    try:
        yield apis
    finally:
        apis.close()
        runpod.close()


def rank_stacks() -> Ranking:
    stacks = [read_stack(name, STACKS) for name in NAMES]
    return offers_ranking(stacks, None, readers=default_readers(stacks), runs=300, clock=lambda: NOW)


def test_every_stacks_offers_are_priced_and_ranked(price_world: PriceApis) -> None:
    ranking = rank_stacks()
    print("\n".join(text_lines(ranking, "stacks " + ", ".join(NAMES))))
    per_provider: dict[str, int] = {}
    for r in ranking.offers:
        per_provider[r.offer.provider] = per_provider.get(r.offer.provider, 0) + 1
    assert per_provider == {"aws": 6, "gcp": 4, "azure": 4, "k8s": 2, "nebius": 4, "runpod": 2}
    why = {r.offer.name: r.why_not for r in ranking.offers}
    assert why["k8s us-central1 g2-standard-8 spot"] == f"no price: {NO_PRICE_API['k8s']}"
    nebius = [r for r in ranking.offers if r.offer.provider == "nebius"]
    down = (
        "no price: Nebius SpotPriceService.List failed: no credentials (NEBIUS_IAM_TOKEN, or a Nebius CLI "
        "profile): "
    )
    assert [str(r.why_not).startswith(down) for r in nebius] == [False, True, False, True]
    assert why["nebius eu-north1 gpu-l40s-a/1gpu-8vcpu-32gb on_demand"] == f"no price: {ON_DEMAND_REASON}"


CLI_STACKS = [
    "--stack",
    "aws-us-east-1",
    "--stack",
    "gcp-us-central1",
    "--stack",
    "azure-eastus",
    "--stack",
    "runpod-eu",
]


def test_offers_table_ranks_and_exits_0(price_world: PriceApis, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--offers", *CLI_STACKS, "--runs", "300"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "spot-eval offers: stacks aws-us-east-1, gcp-us-central1, azure-eastus, runpod-eu\n"
    )
    assert "Answer: aws us-east-1 g5.xlarge spot (aws-us-east-1)" in out


def test_offers_json_is_one_object_per_offer_in_the_decision_shape(
    price_world: PriceApis, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    png = tmp_path / "offers.png"
    assert cli.main(["--offers", *CLI_STACKS, "--runs", "300", "--json", "--plot", str(png)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 6 + 4 + 4 + 2
    first = doc[0]
    assert set(first) >= {
        "rank",
        "offer",
        "price",
        "evidence",
        "inputs",
        "expected_cost",
        "billed_hours",
        "wall_hours",
        "efficiency",
        "p_deadline",
        "eligible",
        "why_not",
        "cost_per_episode",
    }
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_priced_exits_4_apart_from_nothing_eligible(
    price_world: PriceApis, capsys: pytest.CaptureFixture[str]
) -> None:
    price_world.down.add("azure")
    assert cli.main(["--offers", "--stack", "azure-eastus", "--runs", "100"]) == 4
    assert "Answer: nothing could be priced" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--offers"], "error: --offers: needs at least one --stack NAME"),
        (
            ["--offers", "--stack", "nope"],
            "error: stack 'nope': no stacks/Pulumi.nope.yaml (stacks: aws-us-east-1",
        ),
        (
            ["--offers", "--stack", "aws-us-east-1", "--offer-trace", "aws=x"],
            "error: --offer-trace: expected",
        ),
        (
            ["--stack", "aws-us-east-1", "--stack", "gcp-us-central1"],
            "error: --stack: one stack names the workload",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_from_run_gives_tau_and_s_per_instance_type(
    price_world: PriceApis, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from spoteval.record import RunLayout
    from spoteval.store import Store
    from tests.test_offers_rank import _event

    url = f"file://{tmp_path}/record"
    store, layout = Store(url), RunLayout("r1")
    events = [
        _event(0, "a", "start", "g5.xlarge", "initial"),
        _event(1800, "a", "preempted", "g5.xlarge", "provider"),
        _event(3000, "a", "start", "g5.xlarge", "restart_after_preemption"),
        _event(4800, "a", "preempted", "g5.xlarge", "provider"),
    ]
    for seq, event in enumerate(events):
        assert store.put_new(layout.event(event.time, event.node, seq), event.dumps())
    argv = [
        "--offers",
        "--stack",
        "aws-us-east-1",
        "--from-run",
        "r1",
        "--store",
        url,
        "--runs",
        "200",
        "--json",
    ]
    assert cli.main(argv) == 0
    by = {(o["offer"]["instance_type"], o["offer"]["market"]): o for o in json.loads(capsys.readouterr().out)}
    g5 = by[("g5.xlarge", "spot")]
    assert (g5["evidence"]["tau_source"], g5["evidence"]["wait_source"]) == ("run", "run")
    assert g5["evidence"]["detail"] == "run r1: 2 allocations of 1 node(s), 2 preemptions"
    assert g5["inputs"]["lifetime_hours"] == pytest.approx(0.5)
    assert g5["inputs"]["wait_hours"] == pytest.approx(1200 / 3600)
    assert by[("g6.xlarge", "spot")]["evidence"]["tau_source"] == "workload"
    assert by[("g6.xlarge", "spot")]["evidence"]["tau_assumed"] is True
    assert cli.main(["--offers", "--stack", "aws-us-east-1", "--from-run", "r1"]) == 2
    assert (
        capsys.readouterr().err
        == "error: --from-run: needs --store URL, the store that holds the run record\n"
    )
