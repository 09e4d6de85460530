"""Notice watchers against fake metadata services on loopback, SIGTERM, and the price lookup."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent import notices
from spoteval.agent.config import AgentConfig, parse
from spoteval.agent.price import resolve_price
from spoteval.providers import BY_KEY
from spoteval.record import utc_now
from tests.fake_metadata import FakeAws, FakeAzure, FakeAzurePrices, FakeGcp, agent_config, wait_for
from tests.servers import free_port

pytestmark = pytest.mark.timing  # also run beside two busy processes (.ci/loaded-pass)


def _ctx(url: str, provider: str, poll_s: float = 0.05) -> notices.WatchContext:
    return notices.WatchContext(provider, url, poll_s, lambda message: None)


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    fake = FakeAws()
    yield fake
    fake.close()


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    fake = FakeGcp()
    yield fake
    fake.close()


@pytest.fixture
def azure() -> Iterator[FakeAzure]:
    fake = FakeAzure(vm_name="vm-1")
    yield fake
    fake.close()


def test_aws_spot_interruption_arrives_once_with_its_deadline(aws: FakeAws) -> None:
    watcher = notices.AwsWatcher(_ctx(aws.url, "aws"))
    assert watcher.check() == []
    aws.interrupt("stop", seconds=120)
    [notice] = watcher.check()
    assert notice.reason == "spot_interruption" and notice.stops_work
    assert notice.deadline == aws.action_time  # the instance-action's own time, not a guess
    assert notice.details["instance_action"]["action"] == "stop"
    assert watcher.check() == []  # the same instance-action is not a new notice
    assert aws.unauthorized == 0
    gets = [r for r in aws.requests if r.method == "GET"]
    assert gets and all(r.headers.get("x-aws-ec2-metadata-token") in aws.tokens for r in gets)


def test_aws_rebalance_recommendation_does_not_stop_work(aws: FakeAws) -> None:
    watcher = notices.AwsWatcher(_ctx(aws.url, "aws"))
    aws.recommend_rebalance()
    [notice] = watcher.check()
    assert notice.reason == "rebalance_recommendation" and not notice.stops_work


def test_aws_watcher_fetches_a_new_token_when_the_old_one_is_refused(aws: FakeAws) -> None:
    watcher = notices.AwsWatcher(_ctx(aws.url, "aws"))
    watcher.check()
    aws.tokens.clear()  # the service forgot every token (expiry, restart)
    aws.interrupt()
    [notice] = watcher.check()
    assert notice.reason == "spot_interruption"
    assert len([r for r in aws.requests if r.method == "PUT"]) == 2


def test_aws_metadata_without_token_is_refused_by_the_fake(aws: FakeAws) -> None:
    reply = notices.http(aws.url + "/latest/meta-data/spot/instance-action")
    assert reply.status == 401  # the fake enforces IMDSv2, so the watcher's own checks mean something


def test_gcp_long_poll_delivers_preemption_promptly(gcp: FakeGcp) -> None:
    watcher = notices.GcpWatcher(_ctx(gcp.url, "gcp", poll_s=30))
    got: list[notices.Notice] = []
    polls_at_delivery: list[int] = []

    def polls() -> int:
        return sum(1 for r in list(gcp.requests) if "wait_for_change" in r.query)

    def deliver(notice: notices.Notice) -> None:
        polls_at_delivery.append(polls())
        got.append(notice)

    stopping = threading.Event()
    notices.start_watcher(watcher, deliver, stopping)
    assert wait_for(lambda: polls() >= 1, 30)
    waiting = polls()
    gcp.preempt()
    assert wait_for(lambda: bool(got), 30)
    # the poll that was already waiting answered it (its 30 s timeout did not have to run out): the
    # notice came before any new poll was sent
    assert polls_at_delivery == [waiting]
    assert got[0].reason == "preempted"
    assert (got[0].deadline - got[0].received).total_seconds() == BY_KEY["gcp"].notice_s
    assert gcp.missing_header == 0
    stopping.set()


def test_gcp_already_preempted_is_seen_on_the_first_read(gcp: FakeGcp) -> None:
    gcp.preempt()
    notice = notices.GcpWatcher(_ctx(gcp.url, "gcp")).check(wait=True)
    assert notice is not None and notice.reason == "preempted"


def test_azure_preempt_for_this_vm_is_a_notice_until_its_not_before(azure: FakeAzure) -> None:
    watcher = notices.AzureWatcher(_ctx(azure.url, "azure"))
    assert watcher.check() == []
    azure.schedule("Freeze", seconds=10)  # a short pause: not a reason to stop
    azure.schedule("Preempt", seconds=30, resources=["vm-other"])  # another VM of the set
    event_id = azure.schedule("Preempt", seconds=30)
    [notice] = watcher.check()
    assert notice.reason == "scheduled_event" and notice.details["event_id"] == event_id
    assert notice.deadline == azure.not_before[event_id]  # the event's NotBefore
    assert watcher.check() == []
    assert azure.missing_header == 0


def test_azure_acknowledgement_posts_start_requests(azure: FakeAzure) -> None:
    watcher = notices.AzureWatcher(_ctx(azure.url, "azure"))
    event_id = azure.schedule("Preempt", seconds=30)
    [notice] = watcher.check()
    watcher.acknowledge(notice)
    assert [ids for _, ids in azure.acks] == [[event_id]]
    post = next(r for r in azure.requests if r.method == "POST")
    assert post.headers.get("metadata") == "true"
    assert not azure.events  # acknowledged: the event proceeds


def test_azure_without_metadata_header_is_refused_by_the_fake(azure: FakeAzure) -> None:
    assert notices.http(azure.url + notices.AZURE_EVENTS_PATH).status == 400


def test_watchers_registry_covers_every_provider() -> None:
    from spoteval.agent.config import PROVIDERS

    assert set(notices.WATCHERS) == set(PROVIDERS)
    for provider in ("k8s", "nebius", "runpod", "local"):
        assert notices.provider_watcher(provider, None, None, print) is None
    assert isinstance(notices.provider_watcher("aws", None, None, print), notices.AwsWatcher)


def test_unreachable_metadata_is_logged_not_fatal() -> None:
    messages: list[str] = []
    ctx = notices.WatchContext("aws", f"http://127.0.0.1:{free_port()}", 0.05, messages.append)
    stopping = threading.Event()
    thread = notices.start_watcher(notices.AwsWatcher(ctx), lambda n: None, stopping)
    assert wait_for(lambda: bool(messages), 5)
    time.sleep(0.3)
    assert len(messages) == 1  # throttled, not once per poll
    stopping.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_sigterm_becomes_a_notice_with_the_providers_grace() -> None:
    watcher = notices.SignalWatcher(grace_s=5.0)
    old_term, old_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    got: list[notices.Notice] = []
    try:
        watcher.install()
        notices.start_watcher(watcher, got.append, threading.Event())
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait_for(lambda: bool(got), 5)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    assert got[0].reason == "sigterm" and got[0].details == {"signal": "SIGTERM"}
    assert (got[0].deadline - got[0].received).total_seconds() == 5.0


# --- price --------------------------------------------------------------------------------------


def _azure_config(tmp_path: Path, price_api_url: str | None, **extra: Any) -> AgentConfig:
    raw = agent_config(f"file://{tmp_path}/s", {}, "r1", tmp_path, provider="azure", **extra)
    raw["node"].update(region="eastus", instance_type="Standard_NC4as_T4_v3")
    if price_api_url:
        raw["price_api_url"] = price_api_url + "/api/retail/prices"
    return parse(raw)


def test_azure_price_comes_from_the_retail_prices_api(tmp_path: Path) -> None:
    fake = FakeAzurePrices()
    try:
        price = resolve_price(_azure_config(tmp_path, fake.url))
    finally:
        fake.close()
    assert (price.per_hour, price.currency, price.source) == (0.1578, "USD", "api")
    query = fake.requests[0].query
    assert "armSkuName eq 'Standard_NC4as_T4_v3'" in query["$filter"]
    assert "armRegionName eq 'eastus'" in query["$filter"]


def test_configured_price_wins_and_api_failure_means_unknown(tmp_path: Path) -> None:
    config = _azure_config(tmp_path, None, price={"per_hour": 0.2, "currency": "EUR"})
    price = resolve_price(config)
    assert (price.per_hour, price.currency, price.source) == (0.2, "EUR", "configured")
    down = _azure_config(tmp_path, f"http://127.0.0.1:{free_port()}")
    price = resolve_price(down)
    assert (
        price.source == "unknown"
        and price.per_hour is None
        and "price API failed" in price.details["price_error"]
    )


def test_price_without_config_or_node_price_api_is_unknown_and_says_why(tmp_path: Path) -> None:
    raw = agent_config(f"file://{tmp_path}/s", {}, "r1", tmp_path, provider="gcp")
    price = resolve_price(parse(raw))
    assert price.source == "unknown" and "no price API for gcp" in price.details["price_error"]


def test_notice_seconds_left_counts_down() -> None:
    now = utc_now()
    notice = notices.Notice("sigterm", now, now + timedelta(seconds=10))
    assert notice.seconds_left(now) == 10.0
    assert notice.seconds_left(now + timedelta(seconds=3.5)) == 6.5
    assert notice.seconds_left(now + timedelta(seconds=12)) == -2.0


def test_notice_facts_come_from_the_provider_table() -> None:

    assert issubclass(notices.AwsWatcher, notices.PollingWatcher)
    assert issubclass(notices.AzureWatcher, notices.PollingWatcher)
    assert notices.DEFAULT_POLL_S == {"aws": 5.0, "gcp": 60.0, "azure": 1.0}
    assert notices.NOTICE_S == {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
    assert notices.SIGTERM_GRACE_S == {
        "aws": 30.0,
        "gcp": 30.0,
        "azure": 30.0,
        "k8s": 15.0,
        "nebius": 60.0,
        "runpod": 5.0,
        "local": 10.0,
    }
    for key, url in notices.DEFAULT_METADATA_URL.items():
        metadata = BY_KEY[key].metadata
        assert metadata is not None and url == metadata.base_url
    assert sorted(notices.DEFAULT_METADATA_URL) == ["aws", "azure", "gcp"]
