"""Lifetime estimate with censoring, its interval and warnings, and reading traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spoteval.placement import PlacementError
from spoteval.placement.lifetime import (
    chi2_quantile,
    estimate_tau,
    read_trace,
    runs_of,
    tau_interval,
    trace_runs,
)

TRACES = Path(__file__).resolve().parent / "data" / "traces"
V100 = TRACES / "preemption" / "1-node" / "aws-04-22-2023"


def test_chi_square_quantiles_match_the_tables() -> None:
    assert chi2_quantile(0.975, 8) == pytest.approx(17.5345, abs=1e-4)
    assert chi2_quantile(0.025, 6) == pytest.approx(1.2373, abs=1e-4)
    assert chi2_quantile(0.95, 2) == pytest.approx(5.9915, abs=1e-4)


def test_three_preemptions_in_twelve_hours() -> None:
    est = estimate_tau([4.0, 5.0, 3.0], [True, True, True])
    assert est.tau_hours == pytest.approx(4.0)
    low, high = est.interval_hours
    assert low == pytest.approx(24 / 17.5345, rel=1e-4)  # 1.3687
    assert high == pytest.approx(24 / 1.2373, rel=1e-4)  # 19.397
    assert round(low, 2) == 1.37 and round(high, 1) == 19.4


def test_censored_allocations_add_uptime_but_no_preemption() -> None:
    est = estimate_tau([1.0, 2.0, 3.0, 6.0], [True, False, True, False])
    assert (est.preemptions, est.censored, est.total_hours) == (2, 2, 12.0)
    assert est.tau_hours == pytest.approx(6.0)


def test_no_preemption_gives_only_a_lower_bound() -> None:
    est = estimate_tau([10.0], [False])
    assert est.tau_hours is None
    low, high = est.interval_hours
    assert low == pytest.approx(10 / math.log(20))  # T / ln(1/a), a = 0.05
    assert high == math.inf
    assert any("only 0 preemptions" in w for w in est.warnings)
    assert est.to_json()["interval_hours"] == [low, None]


def test_few_preemptions_warn() -> None:
    assert any("fewer than 5" in w for w in estimate_tau([1.0] * 4, [True] * 4).warnings)
    assert not any("fewer than 5" in w for w in estimate_tau([1.0] * 5, [True] * 5).warnings)


def test_irregular_lifetimes_warn_that_they_are_not_exponential() -> None:
    irregular = estimate_tau([0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 9.0], [True] * 7)
    assert irregular.cv is not None and irregular.cv > 1
    assert any("not exponential" in w for w in irregular.warnings)
    regular = estimate_tau([1.0, 2.0, 3.0, 2.0, 1.5, 2.5], [True] * 6)
    assert regular.cv is not None and regular.cv < 1
    assert regular.warnings == ()


def test_a_higher_confidence_widens_the_interval() -> None:
    low95, high95 = tau_interval(12, 3, 0.95)
    low80, high80 = tau_interval(12, 3, 0.80)
    assert low95 < low80 < 4 < high80 < high95


def test_bad_estimate_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="same length"):
        estimate_tau([1.0], [True, False])
    with pytest.raises(ValueError, match="confidence"):
        tau_interval(1.0, 1, 1.5)


# --- traces ---------------------------------------------------------------------------------------


def test_runs_of_ticks() -> None:
    assert runs_of([0, 0, 1, 1, 1, 0, 2, 0]) == [(False, 2), (True, 3), (False, 1), (True, 1), (False, 1)]
    assert runs_of([]) == []


def test_lifetimes_and_waits_of_ticks() -> None:
    # one tick = 1 h: up 3, down 2, up 2, down 1, up 2 (still running at the end)
    runs = trace_runs([0, 0, 0, 1, 1, 0, 0, 1, 0, 0], gap_seconds=3600)
    assert runs.lifetimes_hours == (3.0, 2.0)
    assert runs.waits_hours == (2.0, 1.0)
    assert runs.censored_lifetime_hours == 2.0
    assert runs.censored_wait_hours is None
    est = runs.estimate()
    assert (est.preemptions, est.censored, est.total_hours) == (2, 1, 7.0)


def test_a_leading_wait_is_dropped_and_a_trailing_wait_is_censored() -> None:
    runs = trace_runs([1, 1, 0, 0, 4, 4, 4], gap_seconds=1800)
    assert runs.lifetimes_hours == (1.0,)
    assert runs.waits_hours == ()
    assert runs.censored_wait_hours == 1.5
    assert runs.censored_lifetime_hours is None


@pytest.mark.parametrize(
    ("zone", "preemptions", "tau"),
    [("us-west-2b", 44, 3.20), ("us-east-1c", 41, 1.36), ("us-east-1f", 60, 1.75), ("us-west-2c", 57, 2.28)],
)
def test_v100_traces_give_the_documented_lifetimes(zone: str, preemptions: int, tau: float) -> None:
    path = V100 / f"{zone}_v100_1.json"
    runs = read_trace(path)
    data = json.loads(path.read_text())["data"]
    # the values count the instances running: each file starts at 0, before the first one ran
    leading = next(i for i, v in enumerate(data) if v >= 1)
    assert data[0] == 0 and leading >= 1
    # every tick is accounted for: lifetimes, waits, the censored ends and the dropped leading wait
    total = sum(runs.lifetimes_hours) + sum(runs.waits_hours)
    total += (runs.censored_lifetime_hours or 0) + (runs.censored_wait_hours or 0)
    assert total == pytest.approx((len(data) - leading) * 32 / 3600)
    est = runs.estimate()
    assert est.preemptions == preemptions == len(runs.lifetimes_hours)
    assert est.tau_hours == pytest.approx(tau, rel=0.01)
    assert est.cv is not None and 1.4 <= est.cv <= 2.4  # far from exponential, as the README says
    assert any("not exponential" in w for w in est.warnings)


def test_trace_files_with_problems_are_named(tmp_path: Path) -> None:
    with pytest.raises(PlacementError, match="trace file not found"):
        read_trace(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"metadata": {"gap_seconds": 32}, "data": [0, 0,')
    with pytest.raises(PlacementError, match="malformed JSON"):
        read_trace(broken)
    no_gap = tmp_path / "no_gap.json"
    no_gap.write_text('{"metadata": {}, "data": [0, 1]}')
    with pytest.raises(PlacementError) as err:
        read_trace(no_gap)
    assert err.value.key.endswith("metadata.gap_seconds")
    bad_ticks = tmp_path / "bad_ticks.json"
    bad_ticks.write_text('{"metadata": {"gap_seconds": 32}, "data": [0, "up"]}')
    with pytest.raises(PlacementError, match="ticks must be numbers"):
        read_trace(bad_ticks)
