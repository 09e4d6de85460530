"""The restart measurement reads the price again before every start: a spot price that rises above the
grant's cap after the first cycle refuses the second start (Azure control plane against a loopback
ARM API and Retail Prices API; the stand-in model server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from spoteval import standin
from spoteval.grant import Grant
from spoteval.measure import Measurement, Timeouts
from spoteval.record import Event, RunLayout
from spoteval.store import Store
from tests.fake_api import FakeApi, Reply, Request
from tests.test_clouds_azure import Arm, plane, retail_item


class RisingArm(Arm):
    """The ARM fake whose Linux spot meter rises to `after` once the VM has been started once."""

    def __init__(self, before: float, after: float) -> None:
        super().__init__(delay=0.05)
        self.price, self.after = before, after
        self.price_reads: list[float] = []

    def handle(self, r: Request) -> Reply:
        if r.method == "GET" and r.path == "/api/retail/prices":
            self.price_reads.append(self.price)
            items = [retail_item(self.price)]
            return 200, {"BillingCurrency": "USD", "Items": items, "NextPageLink": None, "Count": 1}, {}
        reply = super().handle(r)
        if r.method == "POST" and r.path.endswith("/start") and reply[0] < 300:
            self.price = self.after  # the market moved while the first cycle ran
        return reply


@pytest.fixture
def arm() -> Iterator[tuple[RisingArm, FakeApi]]:
    state = RisingArm(before=0.12, after=0.9)
    api = FakeApi(state.handle)
    state.url = api.url
    try:
        yield state, api
    finally:
        api.close()


def test_a_price_above_the_cap_at_the_second_start_refuses_it(
    arm: tuple[RisingArm, FakeApi], standin_server: standin.StandinServer, tmp_path: Path
) -> None:
    state, api = arm
    node = plane(api, price=None)
    store = Store(f"file://{tmp_path}/store")
    quiet = Console(file=open(tmp_path / "console.txt", "w"))  # noqa: SIM115 - closed below
    try:
        with Progress(console=quiet, transient=True) as progress:
            measurement = Measurement(
                node,
                node.outputs,
                Grant(price_cap=0.5),
                store,
                mode="stop-start",
                cycles=2,
                leave="stopped",
                timeouts=Timeouts(stop_s=30, start_s=30, serve_s=30, ready_s=30),
                health_url=standin_server.base_url,
                wait_ready=False,
                poll_s=0.02,
                progress=progress,
                console=quiet,
            )
            code = measurement.run()
    finally:
        quiet.file.close()
    assert code == 1
    assert measurement.outcome == "refused" and "price_cap" in (measurement.error or "")
    # a price read before each start: 0.12 under the cap, then 0.9 above it
    assert state.price_reads == [0.12, 0.9]
    assert [(c.price.per_hour if c.price else None) for c in measurement.results] == [0.12]
    assert state.current() in ("deallocating", "deallocated")  # stopped by cycle 2, never started again
    assert len([r for r in api.requests if r.method == "POST" and r.path.endswith("/start")]) == 1
    events = []
    for key in store.list(RunLayout(node.outputs.run_id).events_prefix):
        event, problems = Event.loads(store.get(key) or b"")
        assert problems == []
        events.append(event)
    events.sort(key=lambda e: e.time)
    starts_stops = [(e.kind, e.reason, e.details.get("cycle")) for e in events if e.kind in ("start", "stop")]
    assert starts_stops == [
        ("stop", "measurement", 1),
        ("start", "measurement", 1),
        ("stop", "measurement", 2),
        ("stop", "stop_rule:price_cap", 2),
    ]
    refusal = events[-1]
    assert (refusal.price_per_hour, refusal.price_source) == (0.9, "api")
    assert refusal.details["refused"] == "start"
