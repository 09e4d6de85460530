"""Monte-Carlo of the placement model: discrete episodes on C slots, any lifetime distribution.

The process (the renewal model of `spoteval.placement`, made discrete)
----------------------------------------------------------------------
One node runs up to C episodes at a time from a shared queue of N episodes. A run is a sequence of
allocations. Allocation k lives L_k (from its start to the provider taking it back), boots for B_k
(billed, and lost if the allocation ends first), then its C slots take episodes: episodes cut off by
the allocation's end lose all progress and are started again first on the next allocation (same
episode, same length). Between allocations the node waits W_k for capacity (not billed). The first
allocation starts at time 0 without a wait but with a boot, like on-demand; this first boot is the
one thing the closed form leaves out (it adds tau * (exp(B/tau) - 1), about B, billed hours), so
for large N the simulated mean agrees with the closed form.

- Lifetimes L_k: exponential with mean tau (the closed form's assumption), or replayed from a trace
  (`Empirical` over the lifetimes of `spoteval.placement.lifetime.read_trace`): each allocation's lifetime is
  drawn independently from the trace's observed (uncensored) lifetimes, and each wait from its
  observed capacity waits. This keeps the lifetime distribution (its heavy tail of short lifetimes)
  but not the order of the trace (correlations between successive lifetimes are lost).
- Waits W_k and boots B_k: fixed, or drawn from any `Sampler` (exponential, empirical).
- Episode lengths: the workload's single length, or drawn independently from its samples.

Strategies (all on the same random draws, so their differences are not noise):
- `spot`: spot only, whatever it takes.
- `spot_safety_net`: spot, switching to on-demand for good once the time left before the deadline
  is less than the remaining work plus 2B (the rule of "Can't Be Late", NSDI 2024). The remaining
  work is what on-demand needs: ceil(remaining / C) rounds of the remaining episodes' mean length
  (unstarted episodes counted at the workload's mean length); episodes in flight at the switch are
  lost and restart on the on-demand node, which boots for B first and is never preempted.
- `on_demand`, `non_preemptible`: one boot, then all episodes, never preempted; they differ only in
  price.

Two engines compute the same process. `lockstep` (single episode length): all slots start together
after each boot, so an allocation completes floor((L - B) / D) rounds and each step handles one
allocation of every run at once; this is what makes >= 2000 runs of a typical workload take a few
milliseconds. `events` (episode samples): greedy list scheduling on C slots; each step completes,
for every run at once, the episodes that provably finish before anything else happens (see
`_run_events`), and a run whose allocation ends starts its next one in the same step. Both are
vectorised over runs with numpy and give the same numbers on a single episode length; the `events`
engine is also checked against a plain one-event-at-a-time simulation in the tests.

With episode samples the safety net's remaining-work estimate is a mean, so the on-demand tail
(the last, longest episodes) can overrun the 2B reserve: the safety net then misses the deadline in
a few runs, which the simulation shows rather than hides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import numpy as np

from spoteval.placement.engine import _Draws, _Outcome, _run_events, _run_lockstep, _TooLong
from spoteval.placement.model import closed_form
from spoteval.placement.samplers import DURATION_MODELS, Empirical, Exponential, Fixed, FloatArray, Sampler
from spoteval.placement.workload import PlacementError, Workload

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_SEED",
    "DURATION_MODELS",
    "STRATEGIES",
    "Empirical",
    "Engine",
    "Exponential",
    "Fixed",
    "Sampler",
    "Simulation",
    "StrategyResult",
    "simulate",
]

STRATEGIES: Final[tuple[str, ...]] = ("spot", "spot_safety_net", "on_demand", "non_preemptible")
Engine = Literal["auto", "lockstep", "events"]

DEFAULT_RUNS: Final = 2000
DEFAULT_SEED: Final = 0


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrategyResult:
    """One strategy over all runs. Costs in the prices' currency, times in hours."""

    mean_cost: float
    cost_std: float  # standard deviation over runs; the mean's standard error is cost_std / sqrt(runs)
    cost_quantiles: tuple[float, float, float]  # p05, p50, p95
    mean_billed_hours: float
    billed_std: float
    mean_wall_hours: float
    wall_std: float
    wall_quantiles: tuple[float, float, float]  # p05, p50, p95
    p_deadline: float | None
    mean_preemptions: float
    switched: float | None  # fraction of runs that switched to on-demand (safety net only)

    def to_json(self) -> dict[str, Any]:
        return {
            "mean_cost": self.mean_cost,
            "cost_std": self.cost_std,
            "cost_p05": self.cost_quantiles[0],
            "cost_p50": self.cost_quantiles[1],
            "cost_p95": self.cost_quantiles[2],
            "mean_billed_hours": self.mean_billed_hours,
            "billed_std_hours": self.billed_std,
            "mean_wall_hours": self.mean_wall_hours,
            "wall_std_hours": self.wall_std,
            "wall_p05_hours": self.wall_quantiles[0],
            "wall_p50_hours": self.wall_quantiles[1],
            "wall_p95_hours": self.wall_quantiles[2],
            "p_deadline": self.p_deadline,
            "mean_preemptions": self.mean_preemptions,
            "switched_to_on_demand": self.switched,
        }


@dataclass(frozen=True)
class Simulation:
    """The simulated strategies; `skipped` says why a strategy was not simulated."""

    runs: int
    seed: int
    engine: str
    lifetimes: str
    waits: str
    boots: str
    strategies: Mapping[str, StrategyResult]
    skipped: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "seed": self.seed,
            "engine": self.engine,
            "lifetimes": self.lifetimes,
            "waits": self.waits,
            "boots": self.boots,
            "strategies": {name: result.to_json() for name, result in self.strategies.items()},
            "skipped": dict(self.skipped),
        }


# --- the simulation -----------------------------------------------------------------------------


def _summary(
    cost: FloatArray,
    billed: FloatArray,
    outcome: _Outcome,
    deadline: float | None,
    switched: bool,
) -> StrategyResult:
    cq = np.quantile(cost, [0.05, 0.5, 0.95])
    wq = np.quantile(outcome.wall, [0.05, 0.5, 0.95])
    return StrategyResult(
        mean_cost=float(cost.mean()),
        cost_std=float(cost.std()),
        cost_quantiles=(float(cq[0]), float(cq[1]), float(cq[2])),
        mean_billed_hours=float(billed.mean()),
        billed_std=float(billed.std()),
        mean_wall_hours=float(outcome.wall.mean()),
        wall_std=float(outcome.wall.std()),
        wall_quantiles=(float(wq[0]), float(wq[1]), float(wq[2])),
        p_deadline=None if deadline is None else float(np.mean(outcome.wall <= deadline)),
        mean_preemptions=float(outcome.preemptions.mean()),
        switched=float(outcome.switched.mean()) if switched else None,
    )


def _shares(episodes: int, nodes: int) -> list[int]:
    """Episodes per node of a pool sharing one queue (the end-of-run stealing evens them out)."""
    return [n for n in (episodes // nodes + (1 if i < episodes % nodes else 0) for i in range(nodes)) if n]


def _child(seq: np.random.SeedSequence, node: int) -> np.random.SeedSequence:
    """Node `node`'s random numbers: node 0 keeps the single-node stream; the same for every strategy."""
    if node == 0:
        return seq
    return np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, node))


def simulate(
    workload: Workload,
    *,
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    lifetimes: Sampler | None = None,
    waits: Sampler | None = None,
    boots: Sampler | None = None,
    engine: Engine = "auto",
    strategies: Sequence[str] = STRATEGIES,
    max_allocations: int = 20_000,
) -> Simulation:
    """Simulate `runs` runs of every strategy that applies to `workload`.

    Defaults: exponential lifetimes with the workload's tau, fixed W and B. A strategy is skipped
    (with the reason in `Simulation.skipped`) when it has no price, when the safety net has no
    deadline, or when spot would need more than `max_allocations` allocations in a run.
    """
    if runs < 1:
        raise PlacementError("runs", f"must be >= 1, got {runs}")
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise PlacementError(
            "strategies", f"unknown strategy {unknown[0]!r} (known: {', '.join(STRATEGIES)})"
        )
    lifetimes = lifetimes or Exponential(workload.lifetime_hours)
    waits = waits or Fixed(workload.wait_hours)
    boots = boots or Fixed(workload.boot_hours)
    if engine == "auto":
        engine = "events" if workload.episode_samples_hours else "lockstep"
    elif engine == "lockstep" and workload.episode_samples_hours:
        raise PlacementError("engine", "lockstep needs a single episode length; use events for samples")
    prices = workload.prices
    deadline = workload.deadline_hours
    seq_alloc, seq_od, seq_episodes = np.random.SeedSequence(seed).spawn(3)
    od_boot = boots.sample(np.random.default_rng(seq_od), (runs,))

    def one(w: Workload, node: int, reliable: bool, switch_deadline: float | None) -> _Outcome:
        draws = _Draws(runs, lifetimes, waits, boots, _child(seq_alloc, node))
        if engine == "lockstep":
            return _run_lockstep(
                w,
                draws,
                od_boot,
                reliable=reliable,
                deadline=switch_deadline,
                max_allocations=max_allocations,
            )
        return _run_events(
            w,
            draws,
            od_boot,
            _child(seq_episodes, node),
            reliable=reliable,
            deadline=switch_deadline,
            max_allocations=max_allocations,
        )

    def run(reliable: bool, switch_deadline: float | None) -> _Outcome:
        if workload.nodes == 1:
            return one(workload, 0, reliable, switch_deadline)
        # k nodes sharing one queue: each runs its share of the episodes, preempted independently,
        # with its own boots; the pool's wall time is its slowest node's, its bill the sum
        outcomes = [
            one(replace(workload, episodes=share, nodes=1), node, reliable, switch_deadline)
            for node, share in enumerate(_shares(workload.episodes, workload.nodes))
        ]
        return _Outcome(
            spot_billed=np.sum([o.spot_billed for o in outcomes], axis=0),
            od_billed=np.sum([o.od_billed for o in outcomes], axis=0),
            wall=np.max([o.wall for o in outcomes], axis=0),
            switched=np.any([o.switched for o in outcomes], axis=0),
            preemptions=np.sum([o.preemptions for o in outcomes], axis=0),
        )

    results: dict[str, StrategyResult] = {}
    skipped: dict[str, str] = {}
    wanted = set(strategies)

    # A cheap guard before simulating spot: the closed form's expected number of allocations.
    expected_allocations = 1 + closed_form(workload, tau=lifetimes.mean)["spot"].billed_hours / max(
        lifetimes.mean, 1e-12
    )
    too_many = (
        f"spot would need about {expected_allocations:,.0f} allocations per run "
        f"(more than {max_allocations:,} are not simulated)"
    )
    if "spot" in wanted:
        if expected_allocations > max_allocations / 2:
            skipped["spot"] = too_many
        else:
            try:
                o = run(False, None)
                results["spot"] = _summary(prices.spot * o.spot_billed, o.spot_billed, o, deadline, False)
            except _TooLong as err:
                skipped["spot"] = f"spot runs too long to simulate: {err}"
    if "spot_safety_net" in wanted:
        if deadline is None:
            skipped["spot_safety_net"] = "no deadline: the safety net has nothing to protect"
        elif prices.on_demand is None:
            skipped["spot_safety_net"] = "no on-demand price to switch to"
        else:
            try:
                o = run(False, deadline)
                cost = prices.spot * o.spot_billed + prices.on_demand * o.od_billed
                results["spot_safety_net"] = _summary(cost, o.spot_billed + o.od_billed, o, deadline, True)
            except _TooLong as err:
                skipped["spot_safety_net"] = f"runs too long to simulate: {err}"
    steady = [s for s in ("on_demand", "non_preemptible") if s in wanted]
    for name in steady:
        if prices.of(name) is None:
            skipped[name] = f"no {name} price"
    if any(prices.of(s) is not None for s in steady):
        o = run(True, None)
        for name in steady:
            price = prices.of(name)
            if price is not None:
                results[name] = _summary(price * o.od_billed, o.od_billed, o, deadline, False)
    ordered = {name: results[name] for name in STRATEGIES if name in results}
    return Simulation(
        runs=runs,
        seed=seed,
        engine=engine,
        lifetimes=lifetimes.describe(),
        waits=waits.describe(),
        boots=boots.describe(),
        strategies=ordered,
        skipped=skipped,
    )
