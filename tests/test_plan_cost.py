"""`plan` says what the stack costs and shows each provider's key properties; a pool's weights cache,
attached to nothing, is explained.

Before: `plan` said nothing about money, listed the Nebius VM and the Runpod pod with no properties,
and a pool plan declared a 150 GB weights volume with nothing attached and no word on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scripts import plan as plan_cli
from tests import servers

STACKS = Path(__file__).resolve().parent.parent / "stacks"
NOW = "2026-12-01T09:00:00Z"


def plan_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert plan_cli.main([*argv, "--now", NOW]) == 0
    return capsys.readouterr().out


def test_plan_shows_the_hourly_price_and_the_runs_expected_cost(capsys: pytest.CaptureFixture[str]) -> None:
    out = plan_text(capsys, "--stack", "aws-us-east-1")
    assert out.endswith(
        "cost:\n"
        "  price: 0.42 USD per hour for 1 x g6.xlarge on the spot market (spot-eval:workload.prices.spot)\n"
        "  run: expected cost 5.42 USD for 12.9 billed node-hours, 13.4 h of wall time, deadline met with "
        "probability 1.00 (the placement's closed form for spot-eval:workload)\n"
        "  placement: decides spot (as declared)\n"
    )
    assert plan_cli.main(["--stack", "aws-us-east-1", "--now", NOW, "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert cost["price_per_hour"] == 0.42 and cost["market"] == "spot" and cost["decision"] == "spot"
    assert cost["expected_cost"] == pytest.approx(5.42, abs=0.005)


def test_the_runpod_plan_is_priced_on_demand_and_shows_the_pod(capsys: pytest.CaptureFixture[str]) -> None:
    out = plan_text(capsys, "--stack", "runpod-eu")
    for line in (
        "        gpu_type: NVIDIA A40",
        "        gpu_count: 1",
        "        cloud_type: SECURE",
        "        data_center: EU-RO-1",
        "        max_price_per_gpu: 0.5",
        "        size_gb: 100",
        "  price: 0.44 USD per hour for 1 x NVIDIA A40 on the on_demand market "
        "(spot-eval:workload.prices.on_demand)",
        "  placement: decides on_demand (as declared)",
    ):
        assert line in out.splitlines(), line


def test_the_nebius_plan_shows_preset_and_preemptible(capsys: pytest.CaptureFixture[str]) -> None:
    lines = plan_text(capsys, "--stack", "nebius-eu-north1").splitlines()
    for line in (
        "        resources.platform: gpu-h100-sxm",
        "        resources.preset: 1gpu-16vcpu-200gb",
        '        preemptible: {"onPreemption": "STOP"}',
        "        recoveryPolicy: FAIL",
        "        versioningPolicy: ENABLED",
    ):
        assert line in lines, line


@pytest.mark.parametrize(("stack", "disk"), [("aws-us-east-1", "qwen7b-drill-aws-weights-cache")])
def test_a_pools_weights_cache_attached_to_nothing_is_explained(
    stack: str, disk: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["spot-eval:node"]["count"] = 2
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    out = plan_text(capsys, "--stack", stack, "--stacks-dir", str(tmp_path))
    assert (
        f"notes:\n  {disk}: the weights cache is kept (a hold) and attached to no node: a pool "
        "(node.count 2): "
        "its nodes cache the weights on their own disks; with node.count 1 the node gets it again\n"
    ) in out
    assert "  price: 0.84 USD per hour (2 x 0.42) for 2 x g6.xlarge on the spot market" in out
    # one node attaches it: no note
    assert "notes:" not in plan_text(capsys, "--stack", stack)


def test_price_now_reads_the_offers_reader_and_says_when_it_cannot(
    moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    out = plan_text(capsys, "--stack", "aws-us-east-1", "--price-now")
    assert (
        "  price: 1e-05 USD per hour for 1 x g6.xlarge on the spot market (read now: "
        "ec2:DescribeSpotPriceHistory)"
    ) in out.splitlines()
    monkeypatch.setenv("SPOTEVAL_AZURE_PRICES_URL", "http://127.0.0.1:9/api/retail/prices")
    out = plan_text(capsys, "--stack", "azure-eastus", "--price-now")
    (line,) = [line for line in out.splitlines() if line.startswith("  price: ")]
    assert line.startswith(
        "  price: 0.16 USD per hour for 1 x Standard_NC4as_T4_v3 on the spot market "
        "(spot-eval:workload.prices.spot; price now not read: Azure Retail Prices failed: GET "
        "http://127.0.0.1:9/api/retail/prices: "
    )
