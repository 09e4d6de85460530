"""Ranking the grant's offers by the placement's own figures, checked against the closed form
computed here independently; grant filtering; tau and S per offer; one provider without prices."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from spoteval.clouds import Price
from spoteval.grant import Grant
from spoteval.offers.evidence import Measured, from_run
from spoteval.offers.prices import Offer, OfferPrice, Reading
from spoteval.offers.rank import Candidate, RankedOffer, rank_offers, stack_candidates
from spoteval.placement import PlacementError, Workload, parse_workload
from spoteval.record import Event
from spoteval.report import RunRecord

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
GRANT = Grant(
    price_cap=2.0,
    budget=500,
    regions=("us-east-1",),
    instance_types=("g6.xlarge", "g6.12xlarge", "g5.xlarge"),
)
RAW: dict[str, Any] = {
    "episodes": 2000,
    "episode_minutes": 12,
    "concurrency": 8,
    "lifetime_hours": 6,
    "restart": {"wait_minutes": 30, "boot_minutes": 9},
    "prices": {"spot": 1.0},
    "spot_margin": 0.10,
}
PRICES = {
    ("g6.xlarge", "spot"): 0.40,
    ("g6.xlarge", "on_demand"): 0.8048,
    ("g6.12xlarge", "spot"): 1.90,
    ("g6.12xlarge", "on_demand"): 4.6016,
    ("g5.xlarge", "spot"): 0.45,
    ("g5.xlarge", "on_demand"): 1.006,
}


def workload(**over: Any) -> Workload:
    return parse_workload({**RAW, **over})


def price(per_hour: float, currency: str = "USD") -> OfferPrice:
    return OfferPrice(Price(per_hour, currency, "api"), NOW, kind="current", scope="region", api="test")


def readings(candidates: list[Candidate], **over: Reading) -> dict[Offer, Reading]:
    out: dict[Offer, Reading] = {}
    for c in candidates:
        o = c.offer
        out[o] = over.get(
            f"{o.instance_type}/{o.market}", price(PRICES.get((o.instance_type, o.market), 1.0))
        )
    return out


def aws(w: Workload, grant: Grant = GRANT, **kw: Any) -> list[Candidate]:
    base: dict[str, Any] = {
        "stack": "aws-us-east-1",
        "provider": "aws",
        "region": "us-east-1",
        "instance_type": "g6.xlarge",
    }
    return stack_candidates(**{**base, **kw}, grant=grant, workload=w)


def independent(
    n_episodes: int, d: float, c: int, tau: float, w: float, b: float, p: float, market: str
) -> tuple[float, float]:
    """The closed form, written out here: (expected cost, wall hours)."""
    rounds = n_episodes / c
    if market == "spot":
        billed = rounds * tau * math.exp(b / tau) * (math.exp(d / tau) - 1)
        return p * billed, billed * (w + tau) / tau
    return p * (b + rounds * d), b + rounds * d


def names(ranked: tuple[RankedOffer, ...]) -> list[str]:
    return [f"{r.offer.instance_type}/{r.offer.market}" for r in ranked]


def test_offers_rank_by_the_closed_form_with_c_per_gpu_and_spot_weighed_by_the_margin() -> None:
    cands = aws(workload())
    ranking = rank_offers(cands, readings(cands), concurrency_per="gpu", runs=200)
    gpus = {"g6.xlarge": 1, "g6.12xlarge": 4, "g5.xlarge": 1}
    expected: dict[str, tuple[float, float]] = {}
    for (itype, market), p in PRICES.items():
        expected[f"{itype}/{market}"] = independent(2000, 0.2, 8 * gpus[itype], 6.0, 0.5, 0.15, p, market)
    eligible = [k for k in expected if PRICES[tuple(k.split("/"))] <= 2.0]  # type: ignore[index]
    weigh = {k: expected[k][0] / (0.9 if k.endswith("/spot") else 1.0) for k in eligible}
    assert names(ranking.offers) == [*sorted(eligible, key=weigh.__getitem__), "g6.12xlarge/on_demand"]
    for r in ranking.offers:
        assert r.option is not None and r.workload is not None
        cost, wall = expected[f"{r.offer.instance_type}/{r.offer.market}"]
        assert r.option.expected_cost == pytest.approx(cost, rel=1e-12)
        assert r.option.wall_hours == pytest.approx(wall, rel=1e-12)
        assert r.cost_per_episode == pytest.approx(cost / 2000, rel=1e-12)
        assert r.workload.concurrency == 8 * gpus[r.offer.instance_type]
    assert [r.rank for r in ranking.offers] == [1, 2, 3, 4, 5, None]
    assert ranking.best is ranking.offers[0]
    # the 4-GPU node runs 32 episodes at once: dearer per GPU-hour, a quarter of the wall time
    assert names(ranking.offers)[:3] == ["g6.xlarge/spot", "g5.xlarge/spot", "g6.12xlarge/spot"]
    assert ranking.offers[2].option is not None and ranking.offers[0].option is not None
    assert ranking.offers[2].option.wall_hours == pytest.approx(ranking.offers[0].option.wall_hours / 4)
    last = ranking.offers[-1]
    assert last.why_not == "its price 4.6 per node-hour is above the grant's price_cap 2"


def test_the_workload_states_concurrency_per_gpu() -> None:
    w = workload(concurrency_per="gpu")
    assert w.concurrency_per == "gpu" and w.to_json()["concurrency_per"] == "gpu"
    cands = aws(w)
    ranking = rank_offers(cands, readings(cands), runs=200)
    by = {f"{r.offer.instance_type}/{r.offer.market}": r for r in ranking.offers}
    assert by["g6.12xlarge/spot"].workload is not None and by["g6.12xlarge/spot"].workload.concurrency == 32
    assert by["g6.xlarge/spot"].workload is not None and by["g6.xlarge/spot"].workload.concurrency == 8
    with pytest.raises(
        PlacementError, match=r"workload\.concurrency_per: must be one of node, gpu, got 'pod'"
    ):
        workload(concurrency_per="pod")


def test_per_node_concurrency_keeps_c_and_the_four_gpu_node_costs_more_per_episode() -> None:
    cands = aws(workload())
    ranking = rank_offers(cands, readings(cands), concurrency_per="node", runs=200)
    by = {f"{r.offer.instance_type}/{r.offer.market}": r for r in ranking.offers}
    assert {r.workload.concurrency for r in ranking.offers if r.workload} == {8}
    big, small = by["g6.12xlarge/spot"], by["g6.xlarge/spot"]
    assert big.cost_per_episode and small.cost_per_episode
    assert big.cost_per_episode / small.cost_per_episode == pytest.approx(1.90 / 0.40, rel=1e-12)


def test_offers_outside_the_grant_are_listed_not_eligible_with_the_reason() -> None:
    grant = Grant(price_cap=2.0, regions=("us-east-1",), instance_types=("g6.xlarge",))
    cands = aws(workload(), grant, region="us-west-2", instance_type="g6.2xlarge")
    assert [(c.offer.region, c.offer.instance_type) for c in cands[::2]] == [
        ("us-west-2", "g6.2xlarge"),
        ("us-west-2", "g6.xlarge"),
        ("us-east-1", "g6.2xlarge"),
        ("us-east-1", "g6.xlarge"),
    ]
    ranking = rank_offers(cands, readings(cands), runs=200)
    eligible = [r for r in ranking.offers if r.eligible]
    assert [(r.offer.region, r.offer.instance_type) for r in eligible] == [("us-east-1", "g6.xlarge")] * 2
    why = {(r.offer.region, r.offer.instance_type, r.offer.market): r.why_not for r in ranking.offers}
    assert why[("us-west-2", "g6.2xlarge", "spot")] == (
        "region 'us-west-2' is outside the grant (allowed: us-east-1); "
        "instance type 'g6.2xlarge' is outside the grant (allowed: g6.xlarge)"
    )
    assert why[("us-east-1", "g6.2xlarge", "on_demand")] == (
        "instance type 'g6.2xlarge' is outside the grant (allowed: g6.xlarge)"
    )
    # figures are still given for offers outside the grant, so they can be compared
    assert all(r.option is not None for r in ranking.offers)


def test_a_provider_without_prices_is_reported_per_offer_and_the_rest_ranked() -> None:
    cands = aws(workload())
    down = "aws price API unavailable: DescribeSpotPriceHistory in us-east-1: RequestLimitExceeded"
    got = readings(cands, **{f"{t}/spot": down for t in ("g6.xlarge", "g6.12xlarge", "g5.xlarge")})
    got[cands[-1].offer] = price(1.006, "EUR")  # g5.xlarge on demand, in another currency
    ranking = rank_offers(cands, got, runs=200)
    assert names(ranking.offers) == [
        "g6.xlarge/on_demand",
        "g5.xlarge/on_demand",
        "g6.12xlarge/on_demand",
        "g5.xlarge/spot",
        "g6.12xlarge/spot",
        "g6.xlarge/spot",
    ]
    assert [r.eligible for r in ranking.offers] == [True, False, False, False, False, False]
    assert ranking.offers[1].why_not == "its price is in EUR, the grant's limits in USD"
    assert {r.why_not for r in ranking.offers[3:]} == {f"no price: {down}"}
    assert all(r.option is None and r.price is None for r in ranking.offers[3:])


def test_tau_and_s_come_from_the_run_then_the_workload_and_unmeasured_offers_are_marked() -> None:
    cands = aws(workload(deadline_hours=70, deadline_confidence=0.9))
    run = {
        ("aws", "us-east-1", "g5.xlarge"): Measured(
            "run", "run r1: 9 allocations", lifetime_hours=0.4, wait_hours=1.5, boot_hours=None
        )
    }
    ranking = rank_offers(cands, readings(cands), measured={"run": run}, runs=400, concurrency_per="gpu")
    by = {f"{r.offer.instance_type}/{r.offer.market}": r for r in ranking.offers}
    g5 = by["g5.xlarge/spot"]
    assert g5.evidence is not None and g5.option is not None
    assert (g5.evidence.tau_source, g5.evidence.wait_source, g5.evidence.boot_source) == (
        "run",
        "run",
        "workload",
    )
    assert not g5.evidence.marked
    cost, wall = independent(2000, 0.2, 8, 0.4, 1.5, 0.15, 0.45, "spot")
    assert g5.option.expected_cost == pytest.approx(cost)
    assert g5.option.wall_hours == pytest.approx(wall)
    # a short lifetime and a long wait: cheap per hour, but it misses the deadline
    assert not g5.eligible
    assert (
        g5.why_not
        == "it meets the 70 h deadline with probability 0.00 in 400 simulated runs, below the required 0.9"
    )
    assert names(ranking.offers)[:2] == ["g6.xlarge/spot", "g6.12xlarge/spot"]
    calm = by["g6.xlarge/spot"]
    assert calm.evidence is not None and calm.evidence.marked and calm.evidence.tau_source == "workload"
    assert calm.eligible and calm.option is not None and calm.option.p_deadline == 1.0


def _event(s: float, node: str, kind: str, itype: str, reason: str | None = None) -> Event:
    return Event(
        time=NOW + timedelta(seconds=s),
        run_id="r1",
        node=node,
        kind=kind,
        reason=reason,
        provider="aws",
        region="us-east-1",
        zone="us-east-1b",
        instance_type=itype,
        market="spot",
        price_per_hour=0.4,
        currency="USD",
        price_source="api",
    )


def test_a_run_record_is_measured_per_provider_region_and_instance_type() -> None:
    events = [
        _event(0, "a", "start", "g6.xlarge", "initial"),
        _event(7200, "a", "preempted", "g6.xlarge", "provider"),
        _event(8400, "a", "start", "g6.xlarge", "restart_after_preemption"),
        _event(19200, "a", "preempted", "g6.xlarge", "provider"),
        _event(0, "b", "start", "g5.xlarge", "initial"),
        _event(3600, "b", "heartbeat", "g5.xlarge"),
        _event(18000, "b", "stop", "g5.xlarge", "done"),
    ]
    events.sort(key=lambda e: e.time)
    record = RunRecord("r1", "file:///tmp/x", None, tuple(events), (), {}, ())
    measured = from_run(record)
    assert sorted(measured) == [("aws", "us-east-1", "g5.xlarge"), ("aws", "us-east-1", "g6.xlarge")]
    a = measured[("aws", "us-east-1", "g6.xlarge")]
    assert a.lifetime_hours == pytest.approx((7200 + 10800) / 3600 / 2)
    assert a.wait_hours == pytest.approx(1200 / 3600)
    assert a.detail == "run r1: 2 allocations of 1 node(s), 2 preemptions"
    b = measured[("aws", "us-east-1", "g5.xlarge")]
    assert b.detail == "run r1: 1 allocations of 1 node(s), 0 preemptions"
    assert b.wait_hours is None


def test_a_trace_for_one_offer_gives_its_tau_and_waits_and_is_replayed(tmp_path: Path) -> None:
    from spoteval.offers.build import offers_ranking, parse_offer_trace, stack_offers

    # 10-minute ticks (the number of instances running): up 2 h, down 30 min, up 1 h, down 10 min,
    # up 3 h (censored)
    ticks = [1] * 12 + [0] * 3 + [1] * 6 + [0] + [1] * 18
    trace = tmp_path / "g5.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": ticks}))
    stack = stack_offers(
        "aws-us-east-1",
        {
            "provider": "aws",
            "region": "us-east-1",
            "node": {"instance_type": "g6.xlarge", "gpu_count": 1},
            "grant": {
                "price_cap": 2.0,
                "regions": ["us-east-1"],
                "instance_types": ["g6.xlarge", "g5.xlarge"],
            },
            "workload": RAW,
        },
    )

    class Fixed:
        def read(self, offers: Any, clock: Any) -> dict[Offer, Reading]:
            return {o: price(PRICES[(o.instance_type, o.market)]) for o in offers}

    ranking = offers_ranking(
        [stack],
        None,
        readers={"aws": Fixed()},
        traces=[parse_offer_trace(f"aws:us-east-1:g5.xlarge={trace}")],
        runs=200,
    )
    by = {f"{r.offer.instance_type}/{r.offer.market}": r for r in ranking.offers}
    g5 = by["g5.xlarge/spot"]
    assert g5.evidence is not None and g5.workload is not None
    assert (g5.evidence.tau_source, g5.evidence.wait_source, g5.evidence.boot_source) == (
        "trace",
        "trace",
        "workload",
    )
    assert g5.evidence.trace == str(trace)
    assert g5.workload.lifetime_hours == pytest.approx((2 + 1 + 3) / 2)  # 6 h up, 2 preemptions
    assert g5.workload.wait_hours == pytest.approx((0.5 + 1 / 6) / 2)
    assert by["g6.xlarge/spot"].evidence is not None and by["g6.xlarge/spot"].evidence.marked
    with pytest.raises(PlacementError, match=r"aws:us-east-1:g4dn\.xlarge is not an offer of the stacks"):
        offers_ranking(
            [stack],
            None,
            readers={"aws": Fixed()},
            traces=[parse_offer_trace(f"aws:us-east-1:g4dn.xlarge={trace}")],
        )
    with pytest.raises(PlacementError, match="expected PROVIDER:REGION:INSTANCE_TYPE=FILE"):
        parse_offer_trace("aws:us-east-1=x.json")
