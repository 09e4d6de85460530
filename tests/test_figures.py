"""Numbers a person can read: significant digits, not two decimals; durations in the unit that fits.

Before: a small run read `spot's expected cost 0.01 is 48% below on_demand's 0.01` and `wall 0.00 h`.
"""

from __future__ import annotations

import math

import pytest

from spoteval import figures
from spoteval.placement import parse_workload, place


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.014712, "0.0147"),
        (15.64, "15.6"),
        (43.01, "43"),
        (26.775, "26.8"),
        (2000, "2,000"),
        (1234567.0, "1,234,567"),
        (0.9996, "1"),
        (0.00001, "1e-05"),
        (0.0000645, "6.45e-05"),
        (0, "0"),
        (-0.5, "-0.5"),
        (math.inf, "unbounded"),
    ],
)
def test_figures_keep_three_significant_digits(value: float, text: str) -> None:
    assert figures.sig(value) == text


def test_a_table_column_keeps_its_zeros() -> None:
    assert [figures.sig(v, zeros=True) for v in (43.01, 13.0, 1.2, 0.0147)] == [
        "43.0",
        "13.0",
        "1.20",
        "0.0147",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0412, "0.0412 s"),
        (0.4, "0.4 s"),
        (42.14, "42.1 s"),
        (300, "5 min"),
        (210, "3.5 min"),
        (8000, "2.22 h"),
        (48240, "13.4 h"),
        (700000, "8.1 days"),
        (None, "-"),
        (math.inf, "unbounded"),
    ],
)
def test_durations_are_in_the_unit_that_fits(seconds: float | None, text: str) -> None:
    assert figures.seconds(seconds) == text


def test_hours_read_as_the_unit_that_fits() -> None:
    assert [figures.hours(h) for h in (0.0111, 0.0771, 24, 13.43)] == ["40.0 s", "4.63 min", "24 h", "13.4 h"]


def test_a_small_runs_decision_reads_its_numbers() -> None:
    """A drill-sized run: 320 episodes of 2 s, 8 at a time, tau 30 s, cents of cost."""
    workload = parse_workload(
        {
            "episodes": 320,
            "episode_minutes": 2 / 60,
            "concurrency": 8,
            "lifetime_hours": 30 / 3600,
            "restart": {"wait_minutes": 5 / 60, "boot_minutes": 2.5 / 60},
            "prices": {"spot": 1.2, "on_demand": 3.4},
        }
    )
    placement = place(workload)
    assert placement.reasons == (
        "spot's expected cost 0.03 is 62% below on_demand's 0.0779, more than the 10% margin asks.",
        "on_demand is eligible but costs 0.0779, more than spot's 0.03.",
    )
    assert figures.hours(placement.options["spot"].wall_hours) == "104.9 s"  # not "0.03 h"
