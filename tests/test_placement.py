"""The placement model: workload parsing, the closed form, the decision rules and the break-even."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from spoteval.placement import (
    EXAMPLE_WORKLOAD,
    EXAMPLE_WORKLOAD_YAML,
    PlacementError,
    Workload,
    closed_form,
    parse_workload,
    place,
)

LN2 = math.log(2)


def workload(**changes: Any) -> Workload:
    """The example workload with top-level keys replaced (None removes a key)."""
    raw = {**EXAMPLE_WORKLOAD, **changes}
    return parse_workload({k: v for k, v in raw.items() if v is not None})


def test_example_constant_is_the_example_yaml() -> None:
    assert yaml.safe_load(EXAMPLE_WORKLOAD_YAML) == EXAMPLE_WORKLOAD


def test_example_workload_is_normalised_to_hours() -> None:
    w = parse_workload(EXAMPLE_WORKLOAD)
    assert (w.episodes, w.concurrency, w.rounds) == (2000, 32, 62.5)
    assert w.episode_hours == pytest.approx(0.2)
    assert w.wait_hours == pytest.approx(0.5)
    assert w.boot_hours == pytest.approx(0.15)
    assert (w.prices.spot, w.prices.on_demand, w.prices.non_preemptible) == (1.2, 3.4, 2.1)
    assert (w.deadline_hours, w.deadline_confidence, w.spot_margin) == (24, 0.9, 0.1)
    assert (w.grant.price_cap, w.grant.budget) == (2.0, 500)


def test_defaults_apply_when_optional_keys_are_absent() -> None:
    w = workload(deadline_hours=None, deadline_confidence=None, spot_margin=None, grant=None)
    assert w.deadline_hours is None
    assert (w.deadline_confidence, w.spot_margin) == (0.9, 0.10)
    assert w.grant.budget is None and w.grant.price_cap is None


# --- the closed form, against values computed by hand ---------------------------------------------


def test_closed_form_with_round_numbers() -> None:
    # n = 4 / 2 = 2, tau = 1 h, D = B = ln 2 h, W = 0.5 h:
    # billed = 2 * 1 * e^(ln 2) * (e^(ln 2) - 1) = 2 * 2 * 1 = 4 h, wall = 2 * 1.5 * 2 * 1 = 6 h
    w = parse_workload(
        {
            "episodes": 4,
            "episode_minutes": 60 * LN2,
            "concurrency": 2,
            "lifetime_hours": 1,
            "restart": {"wait_minutes": 30, "boot_minutes": 60 * LN2},
            "prices": {"spot": 1.5, "on_demand": 2.0},
        }
    )
    est = closed_form(w)
    assert est["spot"].billed_hours == pytest.approx(4.0)
    assert est["spot"].wall_hours == pytest.approx(6.0)
    assert est["spot"].expected_cost == pytest.approx(6.0)
    assert est["spot"].efficiency == pytest.approx(2 * LN2 / 4)
    # on-demand: B + n * D = ln 2 + 2 ln 2 = 3 ln 2
    assert est["on_demand"].billed_hours == pytest.approx(3 * LN2)
    assert est["on_demand"].wall_hours == pytest.approx(3 * LN2)
    assert est["on_demand"].expected_cost == pytest.approx(6 * LN2)
    assert est["on_demand"].efficiency == pytest.approx(2 / 3)
    assert "non_preemptible" not in est


def test_closed_form_of_the_example() -> None:
    # n = 62.5, tau = 6, B = 0.15, D = 0.2, W = 0.5:
    # e^(0.15/6) = 1.0253151205, e^(0.2/6) - 1 = 0.0338951312
    # billed = 62.5 * 6 * 1.0253151205 * 0.0338951312 = 13.03243965 h
    est = closed_form(parse_workload(EXAMPLE_WORKLOAD))
    assert est["spot"].billed_hours == pytest.approx(13.03243965, rel=1e-9)
    assert est["spot"].wall_hours == pytest.approx(13.03243965 * 6.5 / 6, rel=1e-9)
    assert est["spot"].expected_cost == pytest.approx(15.63892758, rel=1e-9)
    assert est["spot"].efficiency == pytest.approx(12.5 / 13.03243965, rel=1e-9)
    assert est["on_demand"].billed_hours == pytest.approx(12.65)
    assert est["on_demand"].expected_cost == pytest.approx(43.01)
    assert est["non_preemptible"].expected_cost == pytest.approx(26.565)


def test_episode_samples_average_the_loss_not_the_length() -> None:
    # tau = 1, D_i = ln 2 and ln 3: mean(e^(D_i) - 1) = (1 + 2) / 2 = 1.5, not e^(ln 6 / 2) - 1 = 1.449
    w = parse_workload(
        {
            "episodes": 10,
            "episode_minutes_samples": [60 * LN2, 60 * math.log(3)],
            "concurrency": 5,
            "lifetime_hours": 1,
            "restart": {"wait_minutes": 0, "boot_minutes": 0},
            "prices": {"spot": 1},
        }
    )
    assert w.episode_hours == pytest.approx(math.log(6) / 2)
    assert closed_form(w)["spot"].billed_hours == pytest.approx(2 * 1.5)


def test_spot_cost_is_unbounded_instead_of_overflowing() -> None:
    est = closed_form(workload(lifetime_hours=0.0001))  # e^(3500): beyond floats
    assert est["spot"].billed_hours == math.inf
    assert est["spot"].efficiency == 0


# --- the decision ---------------------------------------------------------------------------------


def test_spot_is_chosen_when_cheaper_than_the_margin_asks() -> None:
    p = place(workload(grant=None), spot_p_deadline=0.99, runs=2000)
    assert p.decision == "spot"
    assert all(o.eligible for o in p.options.values())
    assert "41% below non_preemptible's 26.6" in p.reasons[0]
    assert "probability 0.99 in 2000 simulated runs" in p.reasons[1]


def test_cheapest_other_option_wins_when_the_margin_is_not_met() -> None:
    # spot at 1.9: 1.9 * 13.032 = 24.76 is below 26.565 but not below 0.9 * 26.565 = 23.91
    p = place(workload(grant=None, prices={"spot": 1.9, "on_demand": 3.4, "non_preemptible": 2.1}), 1.0)
    assert p.decision == "non_preemptible"
    assert p.options["spot"].eligible
    assert "only 7% below" in p.reasons[0]


def test_a_larger_margin_turns_the_decision() -> None:
    assert place(workload(grant=None, spot_margin=0.5), 1.0).decision == "non_preemptible"
    assert place(workload(grant=None, spot_margin=0.3), 1.0).decision == "spot"


def test_deadline_excludes_spot_below_the_confidence() -> None:
    p = place(workload(grant=None), spot_p_deadline=0.85, runs=2000)
    assert p.decision == "non_preemptible"
    spot = p.options["spot"]
    assert not spot.eligible
    assert spot.why_not is not None and "probability 0.85" in spot.why_not and "0.9" in spot.why_not


def test_spot_without_a_deadline_risk_is_not_eligible_when_there_is_a_deadline() -> None:
    p = place(workload(grant=None), spot_p_deadline=None)
    assert not p.options["spot"].eligible
    assert "unknown" in (p.options["spot"].why_not or "")


def test_no_deadline_needs_no_simulation() -> None:
    p = place(workload(grant=None, deadline_hours=None), spot_p_deadline=None)
    assert p.decision == "spot"
    assert all(o.p_deadline is None for o in p.options.values())


def test_deadline_excludes_steady_options_that_take_too_long() -> None:
    # on-demand and non-preemptible need B + n D = 12.65 h
    p = place(workload(grant=None, deadline_hours=12.5), spot_p_deadline=0.0)
    assert p.decision == "none"
    assert p.options["on_demand"].p_deadline == 0.0
    assert "beyond the 12.5 h deadline" in (p.options["on_demand"].why_not or "")


def test_price_cap_excludes_spot() -> None:
    p = place(
        workload(
            prices={"spot": 1.2, "on_demand": 3.4, "non_preemptible": 1.05},
            grant={"price_cap": 1.1},
        ),
        1.0,
    )
    assert p.decision == "non_preemptible"
    assert not p.options["spot"].eligible
    assert "above the grant's price_cap 1.1" in (p.options["spot"].why_not or "")
    assert p.break_even.tau_hours is None  # no lifetime makes spot's price fit under the cap


def test_price_cap_applies_to_every_option() -> None:
    p = place(workload(), 1.0)  # the example: cap 2.0, on-demand 3.40, non-preemptible 2.10
    assert p.decision == "spot"
    assert "only eligible option" in p.reasons[0]
    assert not p.options["on_demand"].eligible
    assert not p.options["non_preemptible"].eligible


def test_budget_excludes_options_that_cost_too_much() -> None:
    p = place(workload(grant={"budget": 20}), 1.0)
    assert p.decision == "spot"
    assert not p.options["non_preemptible"].eligible
    assert "above the grant's budget 20" in (p.options["non_preemptible"].why_not or "")


def test_nothing_eligible_is_decision_none_with_every_reason() -> None:
    p = place(workload(grant={"budget": 10}), 1.0)
    assert p.decision == "none"
    assert not any(o.eligible for o in p.options.values())
    assert len(p.reasons) == 4
    assert all("budget 10." in r for r in p.reasons[1:])


def test_spot_alone_is_chosen_when_it_is_the_only_priced_option() -> None:
    p = place(workload(grant=None, prices={"spot": 1.2}), 1.0)
    assert p.decision == "spot"
    assert list(p.options) == ["spot"]


# --- break-even -----------------------------------------------------------------------------------


def test_break_even_tau_is_where_the_decision_flips() -> None:
    base = workload(grant=None)
    be = place(base, 1.0).break_even
    assert be.tau_hours is not None and be.against == "non_preemptible"
    assert be.threshold == pytest.approx(0.9 * 26.565)
    above = workload(grant=None, lifetime_hours=be.tau_hours * 1.001)
    below = workload(grant=None, lifetime_hours=be.tau_hours * 0.999)
    assert place(above, 1.0).decision == "spot"
    assert place(below, 1.0).decision == "non_preemptible"


def test_break_even_price_ratio_is_where_the_decision_flips() -> None:
    be = place(workload(grant=None), 1.0).break_even
    # spot billed / ((1 - margin) * non-preemptible billed) = 13.03243965 / (0.9 * 12.65)
    assert be.price_ratio == pytest.approx(13.03243965 / (0.9 * 12.65), rel=1e-9)
    assert be.price_ratio is not None
    for factor, expected in ((1.001, "spot"), (0.999, "non_preemptible")):
        prices = {"spot": 1.2, "non_preemptible": 1.2 * be.price_ratio * factor}
        assert place(workload(grant=None, prices=prices), 1.0).decision == expected


def test_break_even_against_the_budget_when_spot_is_the_only_option() -> None:
    p = place(workload(), 1.0)
    be = p.break_even
    assert be.price_ratio is None
    assert be.threshold == 500
    assert be.tau_hours is not None
    assert closed_form(p.workload, tau=be.tau_hours)["spot"].expected_cost == pytest.approx(500, rel=1e-6)


def test_break_even_is_null_when_spot_never_wins() -> None:
    # even without preemptions spot costs 3.0 * 12.5 = 37.5 > 0.9 * 26.565
    p = place(workload(grant=None, prices={"spot": 3.0, "non_preemptible": 2.1}), 1.0)
    assert p.break_even.tau_hours is None
    assert "even without preemptions" in p.break_even.note


def test_json_has_exactly_the_documented_keys() -> None:
    doc = place(workload(grant=None), 1.0).to_json({"runs": 1})
    assert set(doc) == {"decision", "reasons", "inputs", "options", "break_even", "simulated"}
    assert set(doc["options"]) == {"spot", "on_demand", "non_preemptible"}
    for option in doc["options"].values():
        assert set(option) == {
            "expected_cost",
            "billed_hours",
            "wall_hours",
            "efficiency",
            "p_deadline",
            "eligible",
            "why_not",
            "policy",
        }
    assert doc["options"]["spot"]["policy"] is None  # no spot policy given to `place`
    assert set(doc["break_even"]) == {"tau_hours", "price_ratio"}
    assert doc["inputs"]["episode_hours"] == pytest.approx(0.2)
    assert doc["inputs"]["boot_hours"] == pytest.approx(0.15)


def test_an_option_without_a_price_is_absent() -> None:
    doc = place(workload(prices={"spot": 1.2, "on_demand": 3.4}), 1.0).to_json()
    assert set(doc["options"]) == {"spot", "on_demand"}


# --- bad input ------------------------------------------------------------------------------------


def _without(path: str) -> dict[str, Any]:
    raw: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in EXAMPLE_WORKLOAD.items()}
    *parents, last = path.split(".")
    node = raw
    for p in parents:
        node = node[p]
    del node[last]
    return raw


def _with(path: str, value: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in EXAMPLE_WORKLOAD.items()}
    *parents, last = path.split(".")
    node = raw
    for p in parents:
        node = node[p]
    node[last] = value
    return raw


@pytest.mark.parametrize(
    "path", ["episodes", "episode_minutes", "concurrency", "lifetime_hours", "restart", "prices",
             "restart.wait_minutes", "restart.boot_minutes", "prices.spot"]
)  # fmt: skip
def test_missing_key_is_named(path: str) -> None:
    with pytest.raises(PlacementError) as err:
        parse_workload(_without(path))
    assert err.value.key == f"workload.{path}"
    assert "missing" in str(err.value)


@pytest.mark.parametrize(
    ("path", "value", "key", "problem"),
    [
        ("restart.boot_minutes", -1, "workload.restart.boot_minutes", "must be >= 0, got -1"),
        ("restart.wait_minutes", -5, "workload.restart.wait_minutes", "must be >= 0, got -5"),
        ("episode_minutes", -12, "workload.episode_minutes", "must be > 0, got -12"),
        ("deadline_hours", -1, "workload.deadline_hours", "must be > 0, got -1"),
        ("episode_minutes", 0, "workload.episode_minutes", "must be > 0, got 0"),
        ("lifetime_hours", 0, "workload.lifetime_hours", "must be > 0, got 0"),
        ("episodes", 0, "workload.episodes", "must be > 0, got 0"),
        ("concurrency", 0, "workload.concurrency", "must be > 0, got 0"),
        ("episodes", 2.5, "workload.episodes", "must be a whole number, got 2.5"),
        ("prices.on_demand", -3.4, "workload.prices.on_demand", "must be >= 0, got -3.4"),
        ("prices.spot", -1, "workload.prices.spot", "must be >= 0, got -1"),
        ("prices.spot", "cheap", "workload.prices.spot", "must be a number, got 'cheap'"),
        ("lifetime_hours", True, "workload.lifetime_hours", "must be a number, got True"),
        ("deadline_confidence", 1.5, "workload.deadline_confidence", "must be <= 1, got 1.5"),
        ("spot_margin", 1, "workload.spot_margin", "must be < 1, got 1"),
        ("restart", [30, 9], "workload.restart", "must be a mapping, got list"),
        ("grant.budget", -5, "workload.grant.budget", "must be >= 0, got -5"),
        (
            "lifetime_interval_hours",
            [1, 3],
            "workload.lifetime_interval_hours",
            "must contain lifetime_hours 6",
        ),
        ("episode_minutes_samples", [10, 12], "workload.episode_minutes_samples", "not both"),
    ],
)
def test_bad_value_is_named(path: str, value: Any, key: str, problem: str) -> None:
    with pytest.raises(PlacementError) as err:
        parse_workload(_with(path, value))
    assert err.value.key == key
    assert problem in str(err.value)


def test_zero_in_episode_samples_is_named_with_its_index() -> None:
    raw = _without("episode_minutes")
    raw["episode_minutes_samples"] = [10, 0, 12]
    with pytest.raises(PlacementError) as err:
        parse_workload(raw)
    assert err.value.key == "workload.episode_minutes_samples[1]"


@pytest.mark.parametrize("path", ["colour", "restart.reboot_minutes", "prices.reserved", "grant.max_price"])
def test_unknown_key_is_named(path: str) -> None:
    with pytest.raises(PlacementError) as err:
        parse_workload(_with(path, 1))
    assert err.value.key == f"workload.{path}"
    assert "unknown key" in str(err.value)


def test_error_keys_carry_the_given_prefix() -> None:
    with pytest.raises(PlacementError) as err:
        parse_workload(_with("restart.boot_minutes", -1), where="spot-eval:workload")
    assert str(err.value) == "spot-eval:workload.restart.boot_minutes: must be >= 0, got -1"
    with pytest.raises(PlacementError) as err:
        parse_workload(_with("restart.boot_minutes", -1), where="")
    assert str(err.value) == "restart.boot_minutes: must be >= 0, got -1"


def test_a_workload_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(PlacementError, match="must be a mapping, got list"):
        parse_workload([1, 2])


def test_spot_that_would_never_finish_is_not_eligible_even_without_deadline_or_budget() -> None:
    raw = {
        "episodes": 100,
        "episode_minutes": 60,
        "concurrency": 1,
        "lifetime_hours": 0.01,
        "restart": {"wait_minutes": 1, "boot_minutes": 5},
        "prices": {"spot": 1.0, "on_demand": 3.0},
    }
    decided = place(parse_workload(raw))
    assert decided.decision == "on_demand"
    assert "never finish" in (decided.options["spot"].why_not or "")
