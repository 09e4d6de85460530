"""The price while running: re-read at its interval from the provider's API (the Azure Retail Prices
fake on loopback), used by the budget rule, and a spot price above the grant's cap stops the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent.__main__ import main
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    agent_config,
    episode_command,
    read_record,
    start_agent,
    wait_for,
    write_config,
    write_manifest,
)
from tests.faults import GatedPrices

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


@pytest.fixture
def prices() -> Iterator[GatedPrices]:
    fake = GatedPrices(price=0.15)
    yield fake
    fake.close()


def _start(
    target: StoreTarget, tmp_path: Path, prices: GatedPrices, agents: list[AgentProcess], **kw: Any
) -> AgentProcess:
    config = agent_config(
        target.url,
        target.options,
        "r1",
        tmp_path,
        provider="azure",
        metadata_url="http://127.0.0.1:9",
        price_api_url=prices.url + "/api/retail/prices",
        price_refresh_s=0.3,
        concurrency=2,
        command=episode_command(seconds=60),
        **kw,
    )
    path = write_config(tmp_path / "agent.json", config)
    ids = [f"e{i}" for i in range(4)]
    assert main(["manifest", "--config", path, write_manifest(tmp_path / "m.jsonl", ids)]) == 0
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    return agent


def test_a_spot_price_above_the_cap_while_running_stops_the_run(
    file_target: StoreTarget, tmp_path: Path, prices: GatedPrices, agents: list[AgentProcess]
) -> None:
    agent = _start(file_target, tmp_path, prices, agents, stop_rules={"price_cap": 0.5})
    store = Store(file_target.url, {})
    assert wait_for(lambda: ("ready", None) in read_record(store, "r1").kinds(), 30), agent.stderr()
    prices.price = 0.9
    assert agent.wait(30) == 0, agent.stderr()
    record = read_record(store, "r1")
    assert record.kinds() == [("start", "initial"), ("ready", None), ("stop", "stop_rule:price_cap")]
    start, stop = record.events[0], record.events[-1]
    assert (start.price_per_hour, start.price_source) == (0.15, "api")
    assert (stop.price_per_hour, stop.price_source) == (0.9, "api")
    assert (stop.details["price_cap"], stop.details["price_per_hour"]) == (0.5, 0.9)
    assert sorted(o for e in record.attempts for o in record.outcomes(e)) == ["interrupted", "interrupted"]
    assert record.results == {}


def test_a_price_above_the_cap_at_start_starts_nothing(
    file_target: StoreTarget, tmp_path: Path, prices: GatedPrices, agents: list[AgentProcess]
) -> None:
    prices.price = 0.9
    agent = _start(file_target, tmp_path, prices, agents, stop_rules={"price_cap": 0.5})
    assert agent.wait(30) == 0, agent.stderr()
    record = read_record(Store(file_target.url, {}), "r1")
    assert record.kinds() == [("start", "initial"), ("stop", "stop_rule:price_cap")]
    assert record.attempts == {} and record.results == {}


def test_the_budget_rule_uses_the_price_read_while_running(
    file_target: StoreTarget, tmp_path: Path, prices: GatedPrices, agents: list[AgentProcess]
) -> None:
    prices.price = 0.0001  # at this price the budget would last for years
    agent = _start(file_target, tmp_path, prices, agents, stop_rules={"budget": 1.0})
    store = Store(file_target.url, {})
    assert wait_for(lambda: ("ready", None) in read_record(store, "r1").kinds(), 30), agent.stderr()
    prices.price = 3600.0  # one unit a second
    assert agent.wait(30) == 0, agent.stderr()
    record = read_record(store, "r1")
    stop = record.events[-1]
    assert (stop.kind, stop.reason, stop.price_per_hour) == ("stop", "stop_rule:budget", 3600.0)
    assert stop.details["budget"] == 1.0
    assert sorted(o for e in record.attempts for o in record.outcomes(e)) == ["interrupted", "interrupted"]
