"""The placement and the offers over a stack answer within what the stack can declare.

Before: `placement --stack runpod-eu` chose spot ("41% below on_demand"), a market the stack refuses.
What a stack can declare is the settings' own rule (`spoteval.stack.market_refusal`, from the
provider's facts), so when a provider's markets change, the placement follows without a list here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from components.settings import SettingsError, parse
from scripts import placement as placement_cli
from spoteval import providers
from spoteval.offers.build import read_stack
from spoteval.stack import declarable_markets, market_refusal, stack_settings

STACKS = Path(__file__).resolve().parent.parent / "stacks"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = placement_cli.main([*argv, "--json", "--runs", "200"])
    return code, json.loads(capsys.readouterr().out)


def test_runpod_placement_leaves_spot_out_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "--stack", "runpod-eu")
    assert code == 0 and doc["decision"] == "on_demand"
    options = doc["options"]
    assert isinstance(options, dict)
    refusal = market_refusal("runpod", "spot")
    assert refusal is not None and refusal.startswith("runpod offers no spot capacity through its API")
    assert options["spot"]["eligible"] is False
    assert options["spot"]["why_not"] == f"left out: this stack cannot declare it: {refusal}"
    reasons = doc["reasons"]
    assert isinstance(reasons, list)
    assert f"spot is left out: this stack cannot declare it: {refusal}." in reasons
    assert doc["break_even"] == {"tau_hours": None, "price_ratio": None}
    # the text says it in the Inputs and the options table
    assert placement_cli.main(["--stack", "runpod-eu", "--runs", "200"]) == 0
    text = capsys.readouterr().out
    assert f"  left out    spot: this stack cannot declare it: {refusal}" in text
    assert "Decision: on_demand" in text


@pytest.mark.parametrize(
    "stack", ["aws-us-east-1", "gcp-us-central1", "azure-eastus", "k8s-gke", "nebius-eu-north1"]
)
def test_stacks_that_declare_both_markets_leave_nothing_out(
    stack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_json(capsys, "--stack", stack)
    assert code in (0, 3)
    inputs = doc["inputs"]
    assert isinstance(inputs, dict) and "left_out" not in inputs
    assert declarable_markets(
        yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]["spot-eval:provider"]
    ) == ("spot", "on_demand")


def test_what_a_stack_can_declare_follows_the_providers_facts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The day a provider's stacks may declare spot, the placement considers it, with no list to edit."""
    spot_too = dataclasses.replace(providers.RUNPOD, markets=("spot", "on_demand"))
    monkeypatch.setitem(providers.PROVIDERS, "runpod", spot_too)
    monkeypatch.setattr(providers, "BY_KEY", {**providers.BY_KEY, "runpod": spot_too})
    assert market_refusal("runpod", "spot") is None
    code, doc = run_json(capsys, "--stack", "runpod-eu")
    assert code == 0 and doc["decision"] == "spot"
    stack = read_stack("runpod-eu", STACKS)
    assert stack.markets == ("spot", "on_demand")


def test_the_settings_refuse_the_market_with_the_same_line(tmp_path: Path) -> None:
    raw = stack_settings(yaml.safe_load((STACKS / "Pulumi.runpod-eu.yaml").read_text()))
    with pytest.raises(SettingsError) as info:
        parse({**raw, "node": {**raw["node"], "market": "spot"}})
    assert str(info.value) == f"node.market: {market_refusal('runpod', 'spot')}"
    settings = parse(raw)
    assert settings.workload is not None and settings.workload.why_left_out("spot") is not None


def test_the_runpod_offers_are_on_demand_only() -> None:
    stack = read_stack("runpod-eu", STACKS)
    assert stack.markets == ("on_demand",)
