"""The placement decision: spot, on-demand, or a non-preemptible box, and why.

The model (renewal cycle, exponential lifetimes; all times in hours)
-------------------------------------------------------------------
A node runs C episodes at a time, so N episodes of length D take n = N / C "rounds" of length D.
A spot allocation lives an exponentially distributed time with mean tau, then the provider takes it
back; every episode in flight loses its progress (episodes have no checkpoints). After a preemption
the node waits W for capacity (not billed), then boots for B (billed, and itself preemptible: boot,
image, weights, warm-up, resume) before the episodes start again from scratch.

Each round then needs an uninterrupted window of length D after the node is up, or of B + D after a
restart. Solving the renewal equation for the expected time until such a window completes, and
summing over the n rounds, gives the closed form:

    spot:             billed_hours = n * tau * exp(B/tau) * (exp(D/tau) - 1)
                      wall_hours   = n * (W + tau) * exp(B/tau) * (exp(D/tau) - 1)
    on_demand,
    non_preemptible:  billed_hours = wall_hours = B + n * D
    expected_cost = price * billed_hours,   efficiency = n * D / billed_hours

With measured episode lengths D_i (`episode_minutes_samples`), `exp(D/tau) - 1` is replaced by the
mean of `exp(D_i/tau) - 1` and D by the mean of D_i: long episodes lose more work per preemption than
the mean suggests, so the mean is never plugged into the exponential.

What the closed form leaves out: the spot formula treats the node as already up at the start (the
first boot is not counted, an error of about B billed hours), it uses the fluid round count n = N / C
(a last partial round counts as a fraction), and it assumes exponential lifetimes. `spoteval.simulate`
runs the same workload with discrete episodes, the first boot and any lifetime distribution, and
gives the probability of meeting the deadline, which the closed form does not.

The decision
------------
An option (spot, on_demand, non_preemptible) is considered when the workload gives its price. It is
eligible when it meets the deadline with probability >= `deadline_confidence` (spot: the simulated
probability; on-demand and non-preemptible: wall_hours <= deadline) and respects the grant: its price
per node-hour is <= the grant's `price_cap` (the grant caps every node-hour, whatever the market) and
its expected cost is <= the grant's `budget`. Spot is chosen when it is eligible and either the only
eligible option or its expected cost is below (1 - spot_margin) x the cheapest eligible other option;
otherwise the cheapest eligible other option is chosen. With no eligible option the decision is `none`.

Break-even: the lifetime tau, and the price ratio (the compared option's price over spot's), at which
the cost comparison flips, everything else held fixed. Spot's expected cost falls monotonically as tau
grows (tau * (exp(D/tau) - 1) and exp(B/tau) both decrease), so the crossing is unique and is found
by bisection on log(tau). Deadline eligibility is not part of the break-even: it is reported apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from spoteval.config_reader import Reader, is_number, key_path
from spoteval.grant import Grant, GrantError

#: The options in the order they are reported; ties in cost go to the earlier one.
OPTIONS: Final = ("spot", "on_demand", "non_preemptible")

#: The built-in example workload, as a user would write it.
EXAMPLE_WORKLOAD_YAML: Final = """\
episodes: 2000              # N
episode_minutes: 12         # D; or episode_minutes_samples: [list] from an earlier run
concurrency: 32             # C episodes in flight on one node
lifetime_hours: 6           # tau, mean allocation lifetime from start to preemption
restart:
  wait_minutes: 30          # W: no instance yet (capacity wait), not billed
  boot_minutes: 9           # B: boot, image, weights, warm-up, resume; billed and preemptible
prices:                     # per node-hour, one currency
  spot: 1.20
  on_demand: 3.40
  non_preemptible: 2.10     # optional: a box nobody takes back (reserved, owned, dedicated)
deadline_hours: 24          # optional
deadline_confidence: 0.9    # default 0.9
spot_margin: 0.10           # default 0.10
grant: {price_cap: 2.0, budget: 500}   # optional
"""

#: The same example as the mapping `yaml.safe_load(EXAMPLE_WORKLOAD_YAML)` gives (no YAML needed).
EXAMPLE_WORKLOAD: Final[Mapping[str, Any]] = {
    "episodes": 2000,
    "episode_minutes": 12,
    "concurrency": 32,
    "lifetime_hours": 6,
    "restart": {"wait_minutes": 30, "boot_minutes": 9},
    "prices": {"spot": 1.20, "on_demand": 3.40, "non_preemptible": 2.10},
    "deadline_hours": 24,
    "deadline_confidence": 0.9,
    "spot_margin": 0.10,
    "grant": {"price_cap": 2.0, "budget": 500},
}

WORKLOAD_KEYS: Final = frozenset(
    {
        "episodes",
        "episode_minutes",
        "episode_minutes_samples",
        "concurrency",
        "lifetime_hours",
        "lifetime_interval_hours",
        "restart",
        "prices",
        "deadline_hours",
        "deadline_confidence",
        "spot_margin",
        "grant",
    }
)
RESTART_KEYS: Final = frozenset({"wait_minutes", "boot_minutes"})
PRICE_KEYS: Final = frozenset(OPTIONS)

# Bisection range for the break-even lifetime, in hours (about 4 seconds to 100 million years).
_TAU_MIN: Final = 1e-3
_TAU_MAX: Final = 1e12
_LOG_OVERFLOW: Final = 700.0


class PlacementError(ValueError):
    """Bad input for the placement decision (workload, stack, trace). Names the key or file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.problem = message


# --- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """Price per node-hour of each option; an option without a price is not considered."""

    spot: float
    on_demand: float | None = None
    non_preemptible: float | None = None

    def of(self, option: str) -> float | None:
        value: float | None = getattr(self, option)
        return value

    def to_json(self) -> dict[str, float]:
        return {name: price for name in OPTIONS if (price := self.of(name)) is not None}


@dataclass(frozen=True)
class Workload:
    """A workload's numbers, normalised to hours. Build it with `parse_workload`."""

    episodes: int
    episode_hours: float
    concurrency: int
    lifetime_hours: float
    wait_hours: float
    boot_hours: float
    prices: Prices
    deadline_hours: float | None = None
    deadline_confidence: float = 0.9
    spot_margin: float = 0.10
    grant: Grant = field(default_factory=Grant)
    #: measured episode lengths; empty when `episode_hours` is a single given length
    episode_samples_hours: tuple[float, ...] = ()
    #: a confidence interval for `lifetime_hours`, when the user knows one (shown on the plot)
    lifetime_interval_hours: tuple[float, float] | None = None

    @property
    def rounds(self) -> float:
        """n = N / C, the number of rounds of C episodes in flight (fluid: may be fractional)."""
        return self.episodes / self.concurrency

    @property
    def episode_lengths_hours(self) -> tuple[float, ...]:
        """The episode lengths the model averages over: the samples, or the one given length."""
        return self.episode_samples_hours or (self.episode_hours,)

    def to_json(self) -> dict[str, Any]:
        """The normalised inputs (all times in hours), as the JSON output's `inputs`."""
        return {
            "episodes": self.episodes,
            "episode_hours": self.episode_hours,
            "episode_hours_samples": list(self.episode_samples_hours) or None,
            "concurrency": self.concurrency,
            "rounds": self.rounds,
            "lifetime_hours": self.lifetime_hours,
            "lifetime_interval_hours": (
                list(self.lifetime_interval_hours) if self.lifetime_interval_hours else None
            ),
            "wait_hours": self.wait_hours,
            "boot_hours": self.boot_hours,
            "prices": self.prices.to_json(),
            "deadline_hours": self.deadline_hours,
            "deadline_confidence": self.deadline_confidence,
            "spot_margin": self.spot_margin,
            "grant": self.grant.to_json(),
        }


class _WorkloadReader(Reader):
    NOT_INTEGER: ClassVar[str] = "must be a whole number, got {value!r}"


def _samples_hours(read: Reader, key: str) -> tuple[float, ...]:
    value = read.value(key)
    if not isinstance(value, list | tuple) or not value:
        read.fail(key, f"must be a non-empty list of minutes, got {value!r}")
    for i, item in enumerate(value):
        if not is_number(item) or item <= 0:
            read.fail_at(f"{read.path(key)}[{i}]", f"must be a number > 0, got {item!r}")
    return tuple(float(v) / 60.0 for v in value)


def parse_workload(raw: object, where: str = "workload") -> Workload:
    """Parse and validate a workload mapping (see `EXAMPLE_WORKLOAD_YAML` for the keys).

    Pure: no files, no YAML. Keys in errors are dotted paths prefixed with `where` (for a stack:
    `spot-eval:workload.restart.boot_minutes`); pass `where=""` for bare key paths. Raises
    `PlacementError` on a missing or unknown key, a wrong type, a negative time or price, or a zero
    episode length, lifetime, episode count or concurrency.
    """
    read = _WorkloadReader(raw, where, error=PlacementError, known=WORKLOAD_KEYS, label="workload")

    episodes = read.integer("episodes", positive=True, whole_floats=True)
    has_length = read.has("episode_minutes")
    has_samples = read.has("episode_minutes_samples")
    if has_length and has_samples:
        read.fail("episode_minutes_samples", "give episode_minutes or episode_minutes_samples, not both")
    if has_samples:
        samples = _samples_hours(read, "episode_minutes_samples")
        episode_hours = math.fsum(samples) / len(samples)
    else:
        if not has_length:
            read.fail("episode_minutes", "missing (required, or give episode_minutes_samples)")
        samples = ()
        episode_hours = read.number("episode_minutes", positive=True) / 60.0
    concurrency = read.integer("concurrency", positive=True, whole_floats=True)
    lifetime = read.number("lifetime_hours", positive=True)

    restart = read.section("restart", RESTART_KEYS)
    wait_hours = restart.number("wait_minutes") / 60.0
    boot_hours = restart.number("boot_minutes") / 60.0

    prices_read = read.section("prices", PRICE_KEYS)
    prices = Prices(
        spot=prices_read.number("spot"),
        on_demand=prices_read.opt_number("on_demand"),
        non_preemptible=prices_read.opt_number("non_preemptible"),
    )

    deadline = read.opt_number("deadline_hours", positive=True)
    confidence = read.number("deadline_confidence", 0.9, positive=True)
    if confidence > 1:
        read.fail("deadline_confidence", f"must be <= 1, got {confidence!r}")
    margin = read.number("spot_margin", 0.10)
    if margin >= 1:
        read.fail("spot_margin", f"must be < 1, got {margin!r}")

    try:
        grant = Grant.parse(read.value("grant"), where=key_path(where, "grant"))
    except GrantError as err:
        raise PlacementError(err.key, str(err).removeprefix(f"{err.key}: ")) from err

    interval = _interval(read, "lifetime_interval_hours", lifetime)
    return Workload(
        episodes=episodes,
        episode_hours=episode_hours,
        concurrency=concurrency,
        lifetime_hours=lifetime,
        wait_hours=wait_hours,
        boot_hours=boot_hours,
        prices=prices,
        deadline_hours=deadline,
        deadline_confidence=confidence,
        spot_margin=margin,
        grant=grant,
        episode_samples_hours=samples,
        lifetime_interval_hours=interval,
    )


def _interval(read: Reader, key: str, tau: float) -> tuple[float, float] | None:
    value = read.value(key)
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(is_number(v) and v > 0 for v in value)
    ):
        read.fail(key, f"must be [low, high] in hours, both > 0, got {value!r}")
    low, high = float(value[0]), float(value[1])
    if not low <= tau <= high:
        read.fail(key, f"must contain lifetime_hours {tau:g}, got [{low:g}, {high:g}]")
    return (low, high)


# --- the closed form ----------------------------------------------------------------------------


def _log_expm1(x: float) -> float:
    """log(exp(x) - 1) for x > 0, without overflow for large x."""
    return x + math.log(-math.expm1(-x))


def _log_mean_loss(lengths: Sequence[float], tau: float) -> float:
    """log of mean_i (exp(D_i/tau) - 1), computed in log space."""
    logs = [_log_expm1(d / tau) for d in lengths]
    top = max(logs)
    return top + math.log(math.fsum(math.exp(v - top) for v in logs) / len(logs))


def _exp_or_inf(log_value: float) -> float:
    return math.exp(log_value) if log_value < _LOG_OVERFLOW else math.inf


@dataclass(frozen=True)
class Estimate:
    """One option's closed-form numbers."""

    billed_hours: float
    wall_hours: float
    expected_cost: float
    efficiency: float


def spot_billed_hours(workload: Workload, tau: float | None = None) -> float:
    """n * tau * exp(B/tau) * mean(exp(D_i/tau) - 1); `inf` when it overflows."""
    tau = workload.lifetime_hours if tau is None else tau
    log_billed = (
        math.log(workload.rounds)
        + math.log(tau)
        + workload.boot_hours / tau
        + _log_mean_loss(workload.episode_lengths_hours, tau)
    )
    return _exp_or_inf(log_billed)


def closed_form(workload: Workload, tau: float | None = None) -> dict[str, Estimate]:
    """Expected billed hours, wall hours, cost and efficiency of every priced option.

    `tau` overrides the workload's lifetime (used for the break-even and the plot).
    """
    tau = workload.lifetime_hours if tau is None else tau
    work = workload.rounds * workload.episode_hours
    out: dict[str, Estimate] = {}
    billed = spot_billed_hours(workload, tau)
    wall = billed * (workload.wait_hours + tau) / tau
    out["spot"] = Estimate(
        billed_hours=billed,
        wall_hours=wall,
        expected_cost=workload.prices.spot * billed if billed < math.inf else math.inf,
        efficiency=work / billed,
    )
    steady = workload.boot_hours + work
    for name in OPTIONS[1:]:
        price = workload.prices.of(name)
        if price is not None:
            out[name] = Estimate(
                billed_hours=steady, wall_hours=steady, expected_cost=price * steady, efficiency=work / steady
            )
    return out


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionResult:
    """One option's numbers and eligibility, as in the JSON output's `options`."""

    name: str
    price: float
    billed_hours: float
    wall_hours: float
    expected_cost: float
    efficiency: float
    p_deadline: float | None
    eligible: bool
    why_not: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "expected_cost": _finite(self.expected_cost),
            "billed_hours": _finite(self.billed_hours),
            "wall_hours": _finite(self.wall_hours),
            "efficiency": self.efficiency,
            "p_deadline": self.p_deadline,
            "eligible": self.eligible,
            "why_not": self.why_not,
        }


@dataclass(frozen=True)
class BreakEven:
    """Where the cost comparison flips, everything else held fixed.

    `tau_hours`: the lifetime at which spot's expected cost equals `threshold`, the most it may cost
    and still be chosen (the smaller of the budget and (1 - spot_margin) x the cheapest eligible
    other option). `price_ratio`: the ratio of `against`'s price to spot's price at which spot's
    expected cost equals (1 - spot_margin) x `against`'s. Each is None when nothing flips it.
    """

    tau_hours: float | None
    price_ratio: float | None
    against: str | None
    threshold: float | None
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"tau_hours": self.tau_hours, "price_ratio": self.price_ratio}


@dataclass(frozen=True)
class Placement:
    """The decision, its reasons, every option's numbers and the break-even."""

    workload: Workload
    decision: str
    reasons: tuple[str, ...]
    options: Mapping[str, OptionResult]
    break_even: BreakEven

    def to_json(self, simulated: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON document: decision, reasons, inputs, options, break_even, simulated."""
        return {
            "decision": self.decision,
            "reasons": list(self.reasons),
            "inputs": self.workload.to_json(),
            "options": {name: option.to_json() for name, option in self.options.items()},
            "break_even": self.break_even.to_json(),
            "simulated": dict(simulated) if simulated is not None else None,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def money(value: float) -> str:
    """A cost or price for reading: two decimals, or 'unbounded'."""
    # round first so that float noise (26.774999... vs 26.775000...) does not print two values
    return f"{round(value, 6):,.2f}" if math.isfinite(value) else "unbounded"


def hours(value: float) -> str:
    """A duration in hours for reading: three significant digits."""
    if not math.isfinite(value):
        return "unbounded"
    return f"{value:.3g} h" if value < 1000 else f"{value:,.0f} h"


#: An option whose expected wall time passes this (over a century) is never eligible, deadline or not.
NEVER_FINISHES_HOURS: Final = 1e6


def _why_not(
    workload: Workload,
    name: str,
    estimate: Estimate,
    *,
    price: float,
    p_deadline: float | None,
    runs: int | None,
) -> list[str]:
    problems: list[str] = []
    grant = workload.grant
    deadline = workload.deadline_hours
    if not math.isfinite(estimate.wall_hours) or estimate.wall_hours > NEVER_FINISHES_HOURS:
        problems.append(
            f"it would practically never finish (expected wall time {estimate.wall_hours:.3g} h): "
            "the lifetime is far shorter than an episode plus a boot"
        )
    if deadline is not None:
        if name == "spot":
            if p_deadline is None:
                problems.append(
                    f"its chance of meeting the {hours(deadline)} deadline is unknown (not simulated)"
                )
            elif p_deadline < workload.deadline_confidence:
                seen = f" in {runs} simulated runs" if runs else ""
                problems.append(
                    f"it meets the {hours(deadline)} deadline with probability {p_deadline:.2f}{seen}, "
                    f"below the required {workload.deadline_confidence:g}"
                )
        elif estimate.wall_hours > deadline:
            problems.append(
                f"its wall time {hours(estimate.wall_hours)} is beyond the {hours(deadline)} deadline"
            )
    if grant.price_cap is not None and price > grant.price_cap:
        problems.append(
            f"its price {money(price)} per node-hour is above the grant's price_cap {money(grant.price_cap)}"
        )
    if grant.budget is not None and estimate.expected_cost > grant.budget:
        problems.append(
            f"its expected cost {money(estimate.expected_cost)} is above "
            f"the grant's budget {money(grant.budget)}"
        )
    return problems


def place(workload: Workload, spot_p_deadline: float | None = None, runs: int | None = None) -> Placement:
    """Decide where to run `workload`.

    `spot_p_deadline` is the probability that pure spot meets the deadline (from `spoteval.simulate`,
    over `runs` runs); without a deadline it is not needed. With a deadline and no probability, spot
    is not eligible (its deadline risk is unknown).
    """
    estimates = closed_form(workload)
    deadline = workload.deadline_hours
    options: dict[str, OptionResult] = {}
    for name, estimate in estimates.items():
        price = workload.prices.of(name)
        assert price is not None  # closed_form only returns priced options
        if deadline is None:
            p_deadline = None
        elif name == "spot":
            p_deadline = spot_p_deadline
        else:
            p_deadline = 1.0 if estimate.wall_hours <= deadline else 0.0
        problems = _why_not(workload, name, estimate, price=price, p_deadline=p_deadline, runs=runs)
        options[name] = OptionResult(
            name=name,
            price=price,
            billed_hours=estimate.billed_hours,
            wall_hours=estimate.wall_hours,
            expected_cost=estimate.expected_cost,
            efficiency=estimate.efficiency,
            p_deadline=p_deadline,
            eligible=not problems,
            why_not="; ".join(problems) if problems else None,
        )

    decision, reasons = _decide(workload, options, runs)
    return Placement(
        workload=workload,
        decision=decision,
        reasons=tuple(reasons),
        options=options,
        break_even=break_even(workload, options),
    )


def _cheapest_other(options: Mapping[str, OptionResult]) -> OptionResult | None:
    others = [o for name, o in options.items() if name != "spot" and o.eligible]
    return min(others, key=lambda o: o.expected_cost) if others else None


def _decide(
    workload: Workload, options: Mapping[str, OptionResult], runs: int | None
) -> tuple[str, list[str]]:
    spot = options["spot"]
    other = _cheapest_other(options)
    margin = workload.spot_margin
    reasons: list[str] = []
    if spot.eligible and other is None:
        decision = "spot"
        reasons.append(
            f"spot is the only eligible option, at an expected cost of {money(spot.expected_cost)} "
            f"and {hours(spot.wall_hours)} of wall time."
        )
    elif spot.eligible and other is not None:
        limit = (1 - margin) * other.expected_cost
        below = 1 - spot.expected_cost / other.expected_cost if other.expected_cost > 0 else -math.inf
        if spot.expected_cost < limit:
            decision = "spot"
            reasons.append(
                f"spot's expected cost {money(spot.expected_cost)} is {below:.0%} below {other.name}'s "
                f"{money(other.expected_cost)}, more than the {margin:.0%} margin asks."
            )
        else:
            decision = other.name
            relation = f"only {below:.0%} below" if below > 0 else "not below"
            reasons.append(
                f"{other.name} is chosen: spot's expected cost {money(spot.expected_cost)} is {relation} "
                f"{other.name}'s {money(other.expected_cost)}, less than the {margin:.0%} margin asks."
            )
    elif other is not None:
        decision = other.name
        reasons.append(
            f"{other.name} is the cheapest eligible option, at an expected cost of "
            f"{money(other.expected_cost)} and {hours(other.wall_hours)} of wall time."
        )
    else:
        decision = "none"
        reasons.append("no option is eligible, so there is nowhere to run this workload within its limits.")

    chosen = options.get(decision)
    if chosen is not None and workload.deadline_hours is not None and chosen.p_deadline is not None:
        if decision == "spot":
            seen = f" in {runs} simulated runs" if runs else ""
            reasons.append(
                f"spot meets the {hours(workload.deadline_hours)} deadline with probability "
                f"{chosen.p_deadline:.2f}{seen} (required: {workload.deadline_confidence:g})."
            )
        else:
            reasons.append(
                f"{decision} finishes in {hours(chosen.wall_hours)}, within the "
                f"{hours(workload.deadline_hours)} deadline."
            )
    for name, option in options.items():
        if name == decision:
            continue
        if not option.eligible:
            reasons.append(f"{name} is not eligible: {option.why_not}.")
        elif chosen is not None and name != "spot":
            reasons.append(
                f"{name} is eligible but costs {money(option.expected_cost)}, more than {decision}'s "
                f"{money(chosen.expected_cost)}."
            )
    return decision, reasons


def _bisect_log(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of a decreasing f on [low, high] (f(low) > 0 > f(high)), by bisection on log x."""
    a, b = math.log(low), math.log(high)
    for _ in range(200):
        mid = (a + b) / 2
        if f(math.exp(mid)) > 0:
            a = mid
        else:
            b = mid
        if b - a < 1e-12:
            break
    return math.exp((a + b) / 2)


def break_even(workload: Workload, options: Mapping[str, OptionResult]) -> BreakEven:
    """The lifetime and the price ratio at which the cost comparison flips (see `BreakEven`)."""
    spot = options["spot"]
    grant = workload.grant
    if grant.price_cap is not None and spot.price > grant.price_cap:
        return BreakEven(None, None, None, None, "spot's price is above the price cap at any lifetime.")
    other = _cheapest_other(options)
    margin = workload.spot_margin
    limits = []
    if other is not None:
        limits.append((1 - margin) * other.expected_cost)
    if grant.budget is not None:
        limits.append(grant.budget)
    if not limits:
        return BreakEven(
            None, None, None, None, "no other option and no budget: cost never changes the decision."
        )
    threshold = min(limits)

    price_ratio: float | None = None
    if other is not None and spot.price > 0 and math.isfinite(spot.billed_hours):
        price_ratio = spot.billed_hours / ((1 - margin) * other.billed_hours)

    what = (
        f"(1 - {margin:g}) x {other.name}'s {money(other.expected_cost)}"
        if other is not None and threshold < (grant.budget if grant.budget is not None else math.inf)
        else f"the budget {money(threshold)}"
    )
    # log(spot cost) - log(threshold), decreasing in tau; at tau -> infinity spot costs price * n * D.
    if spot.price == 0:
        return BreakEven(None, price_ratio, other.name if other else None, threshold, "spot is free.")
    if threshold <= 0:
        return BreakEven(None, price_ratio, other.name if other else None, threshold, "nothing costs less.")
    log_threshold = math.log(threshold)

    def excess(tau: float) -> float:
        return math.log(spot.price) + math.log(max(spot_billed_hours(workload, tau), 1e-300)) - log_threshold

    tau = workload.lifetime_hours
    if excess(_TAU_MAX) >= 0:
        note = f"spot's expected cost stays above {what} even without preemptions."
        tau_hours = None
    elif excess(_TAU_MIN) <= 0:
        note = f"spot's expected cost stays below {what} for any lifetime above {hours(_TAU_MIN)}."
        tau_hours = None
    else:
        tau_hours = _bisect_log(excess, _TAU_MIN, _TAU_MAX)
        side = "above it: spot is cheap enough" if tau > tau_hours else "below it: spot costs too much"
        note = (
            f"spot's expected cost equals {what} at tau = {hours(tau_hours)}; "
            f"the workload's tau {hours(tau)} is {side}."
        )
    return BreakEven(tau_hours, price_ratio, other.name if other else None, threshold, note)
