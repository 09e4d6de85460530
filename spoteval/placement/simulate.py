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

Strategies (all on the same random draws, so their differences are not noise; the deadline
policies are those of Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under Deadlines",
NSDI 2024, spelled out in spoteval.placement.policies):
- `spot`: spot only, whatever it takes.
- `spot_safety_net` (the paper's Greedy): spot, switching to on-demand for good once the time left
  before the deadline is less than the remaining work plus 2B. The remaining work is what on-demand
  needs: ceil(remaining / C) rounds of the remaining episodes' mean length (unstarted episodes
  counted at the workload's mean length); episodes in flight at the switch are lost and restart on
  the on-demand node, which boots for B first and is never preempted.
- `uniform_progress` (the paper's Uniform Progress, with its hysteresis): the same safety net, and
  on-demand while no spot is up and the work done is behind the uniform pace, back to spot once it
  is ahead by the pace of 2B and spot is up. It decides at ticks (spoteval.placement.ticks): on
  drawn lifetimes every half the shortest of B and the episode lengths, on a trace at its
  ticks.
- `on_demand`, `non_preemptible`: one boot, then all episodes, never preempted; they differ only in
  price.

Ordered replay (`trace=`): spot capacity is the trace's, in order, from a seeded start tick per run
(spoteval.placement.availability), and every spot strategy runs on the tick engine, as the
paper's simulator does; the draws above are not used for spot.

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

from spoteval.placement.availability import (
    DrawnAvailability,
    Trace,
    TraceAvailability,
    TraceDraws,
    tick_for_draws,
)
from spoteval.placement.closed_form import closed_form
from spoteval.placement.engine import _Draws, _Outcome, _run_lockstep, _TooLong
from spoteval.placement.events import _run_events
from spoteval.placement.lifetime import trace_runs
from spoteval.placement.samplers import DURATION_MODELS, Empirical, Exponential, Fixed, FloatArray, Sampler
from spoteval.placement.ticks import run_ticks
from spoteval.placement.workload import PlacementError, Workload

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_SEED",
    "DURATION_MODELS",
    "STRATEGIES",
    "Empirical",
    "Engine",
    "Exponential",
    "FirstSwitch",
    "Fixed",
    "Sampler",
    "Simulation",
    "StrategyResult",
    "simulate",
]

STRATEGIES: Final[tuple[str, ...]] = (
    "spot",
    "spot_safety_net",
    "uniform_progress",
    "on_demand",
    "non_preemptible",
)
#: the strategies that need a deadline and an on-demand price (they switch to on-demand)
SWITCHING: Final = ("spot_safety_net", "uniform_progress")
Engine = Literal["auto", "lockstep", "events"]

DEFAULT_RUNS: Final = 2000
DEFAULT_SEED: Final = 0


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstSwitch:
    """When the runs that went on-demand first did so (medians over those runs, hours)."""

    runs: float  # fraction of runs that went on-demand at all
    at_hours: float  # time since the start
    work_left_hours: float  # work left at on-demand speed then
    to_deadline_hours: float | None  # time left to the deadline then

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "at_hours_p50": self.at_hours,
            "work_left_hours_p50": self.work_left_hours,
            "to_deadline_hours_p50": self.to_deadline_hours,
        }


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
    switched: float | None  # fraction of runs that switched to on-demand (switching strategies only)
    mean_spot_hours: float = 0.0  # billed on spot (boots and lost work included)
    spot_work_hours: float = 0.0  # episode work completed on spot, node-hours (N D / C in all)
    first_switch: FirstSwitch | None = None

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
            "mean_spot_hours": self.mean_spot_hours,
            "spot_work_hours": self.spot_work_hours,
            "first_switch": self.first_switch.to_json() if self.first_switch else None,
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
    #: how spot capacity came to the tick engine (an ordered trace, or the draws and the tick)
    ticks: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "seed": self.seed,
            "engine": self.engine,
            "lifetimes": self.lifetimes,
            "waits": self.waits,
            "boots": self.boots,
            "ticks": self.ticks,
            "strategies": {name: result.to_json() for name, result in self.strategies.items()},
            "skipped": dict(self.skipped),
        }


# --- the simulation -----------------------------------------------------------------------------


def _first_switch(outcome: _Outcome, deadline: float | None) -> FirstSwitch | None:
    went = ~np.isnan(outcome.switch_at)
    if not went.any():
        return None
    at = float(np.median(outcome.switch_at[went]))
    return FirstSwitch(
        runs=float(went.mean()),
        at_hours=at,
        work_left_hours=float(np.median(outcome.switch_left[went])),
        to_deadline_hours=None if deadline is None else float(np.median(deadline - outcome.switch_at[went])),
    )


def _summary(
    cost: FloatArray,
    billed: FloatArray,
    outcome: _Outcome,
    deadline: float | None,
    *,
    switched: bool,
    work_per_episode: float,
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
        mean_spot_hours=float(outcome.spot_billed.mean()),
        spot_work_hours=float(outcome.spot_done.mean()) * work_per_episode,
        first_switch=_first_switch(outcome, deadline) if switched else None,
    )


def _shares(episodes: int, nodes: int) -> list[int]:
    """Episodes per node of a pool sharing one queue (the end-of-run stealing evens them out)."""
    return [n for n in (episodes // nodes + (1 if i < episodes % nodes else 0) for i in range(nodes)) if n]


def _child(seq: np.random.SeedSequence, node: int) -> np.random.SeedSequence:
    """Node `node`'s random numbers: node 0 keeps the single-node stream; the same for every strategy."""
    if node == 0:
        return seq
    return np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, node))


class _Runner:
    """Runs one strategy's outcome for every run, on one node or a pool of nodes sharing a queue."""

    def __init__(
        self,
        workload: Workload,
        *,
        runs: int,
        seed: int,
        samplers: tuple[Sampler, Sampler, Sampler],
        engine: str,
        trace: Trace | None,
        max_allocations: int,
    ) -> None:
        self.workload, self.runs, self.engine, self.trace = workload, runs, engine, trace
        self.samplers = samplers
        self.max_allocations = max_allocations
        self.seq_alloc, seq_od, self.seq_episodes = np.random.SeedSequence(seed).spawn(3)
        self.od_boot = samplers[2].sample(np.random.default_rng(seq_od), (runs,))
        self.tick = (
            trace.tick_hours
            if trace is not None
            else tick_for_draws(workload.episode_lengths_hours, workload.boot_hours, workload.deadline_hours)
        )

    def _draws(self, node: int) -> _Draws:
        return _Draws(self.runs, *self.samplers, _child(self.seq_alloc, node))

    def ticks_description(self) -> str:
        if self.trace is not None:
            return self._availability(0).describe()
        return DrawnAvailability(
            self._draws(0), self.runs, self.tick, "the drawn lifetimes and waits"
        ).describe()

    def _availability(self, node: int) -> TraceAvailability | DrawnAvailability:
        if self.trace is None:
            return DrawnAvailability(self._draws(node), self.runs, self.tick, "the drawn lifetimes and waits")
        # a count trace gives every node of a pool the same start (node j is up while more than j
        # instances could be launched); a 1-node trace gives each node a start of its own
        seq = self.seq_alloc if self.trace.counts else _child(self.seq_alloc, node)
        window = self.workload.deadline_hours or 0.0
        return TraceAvailability(
            self.trace, self.runs, seq, node=node, window_hours=window, boots=self.samplers[2]
        )

    def _one(self, w: Workload, node: int, strategy: str) -> _Outcome:
        reliable = strategy in ("on_demand", "non_preemptible")
        if self.trace is not None and strategy == "spot":
            return self._spot_on_trace(w, node)
        on_ticks = strategy == "uniform_progress" or (self.trace is not None and not reliable)
        deadline = w.deadline_hours
        if on_ticks:
            return run_ticks(
                w,
                self._availability(node),
                strategy,
                self.od_boot,
                _child(self.seq_episodes, node),
                deadline=deadline,
            )
        switch_deadline = deadline if strategy == "spot_safety_net" else None
        if self.engine == "lockstep":
            return _run_lockstep(
                w,
                self._draws(node),
                self.od_boot,
                reliable=reliable,
                deadline=switch_deadline,
                max_allocations=self.max_allocations,
            )
        return _run_events(
            w,
            self._draws(node),
            self.od_boot,
            _child(self.seq_episodes, node),
            reliable=reliable,
            deadline=switch_deadline,
            max_allocations=self.max_allocations,
        )

    def _spot_on_trace(self, w: Workload, node: int) -> _Outcome:
        """Spot alone on the ordered trace: its allocations are the trace's up-runs from each start, so
        the event engines run it exactly (what the tick engine gives, without stepping the ticks)."""
        availability = self._availability(node)
        assert isinstance(availability, TraceAvailability)
        draws = TraceDraws(availability, self.runs, self.samplers[2], _child(self.seq_alloc, node))
        if self.engine == "lockstep":
            o = _run_lockstep(
                w, draws, self.od_boot, reliable=False, deadline=None, max_allocations=self.max_allocations
            )
        else:
            o = _run_events(
                w,
                draws,
                self.od_boot,
                _child(self.seq_episodes, node),
                reliable=False,
                deadline=None,
                max_allocations=self.max_allocations,
            )
        o.wall += draws.initial_wait
        return o

    def run(self, strategy: str) -> _Outcome:
        w = self.workload
        if w.nodes == 1:
            return self._one(w, 0, strategy)
        # k nodes sharing one queue: each runs its share of the episodes, preempted independently,
        # with its own boots; the pool's wall time is its slowest node's, its bill the sum
        return _Outcome.pool(
            [
                self._one(replace(w, episodes=share, nodes=1), node, strategy)
                for node, share in enumerate(_shares(w.episodes, w.nodes))
            ]
        )


def _checked(workload: Workload, runs: int, strategies: Sequence[str], engine: Engine) -> Engine:
    if runs < 1:
        raise PlacementError("runs", f"must be >= 1, got {runs}")
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise PlacementError(
            "strategies", f"unknown strategy {unknown[0]!r} (known: {', '.join(STRATEGIES)})"
        )
    if engine == "auto":
        return "events" if workload.episode_samples_hours else "lockstep"
    if engine == "lockstep" and workload.episode_samples_hours:
        raise PlacementError("engine", "lockstep needs a single episode length; use events for samples")
    return engine


def _why_skipped(workload: Workload, strategy: str) -> str | None:
    if strategy in SWITCHING:
        if workload.deadline_hours is None:
            return "no deadline: the policy has nothing to protect"
        if workload.prices.on_demand is None:
            return "no on-demand price to switch to"
    elif strategy != "spot" and workload.prices.of(strategy) is None:
        return f"no {strategy} price"
    return None


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
    trace: Trace | None = None,
) -> Simulation:
    """Simulate `runs` runs of every strategy that applies to `workload`.

    Defaults: exponential lifetimes with the workload's tau, fixed W and B. With `trace`, spot
    capacity is the trace's, replayed in order (the lifetimes and waits are then only described).
    A strategy is skipped (with the reason in `Simulation.skipped`) when it has no price, when a
    switching policy has no deadline or no on-demand price, or when spot would need more than
    `max_allocations` allocations in a run.
    """
    engine = _checked(workload, runs, strategies, engine)
    if trace is not None and lifetimes is None:
        found = trace_runs((~trace.up()).astype(np.int64), trace.gap_seconds, trace.source)
        if found.lifetimes_hours:
            lifetimes = Empirical(found.lifetimes_hours, "trace up-runs")
    lifetimes = lifetimes or Exponential(workload.lifetime_hours)
    waits = waits or Fixed(workload.wait_hours)
    boots = boots or Fixed(workload.boot_hours)
    runner = _Runner(
        workload,
        runs=runs,
        seed=seed,
        samplers=(lifetimes, waits, boots),
        engine=engine,
        trace=trace,
        max_allocations=max_allocations,
    )
    prices = workload.prices
    deadline = workload.deadline_hours
    per_episode = float(np.mean(workload.episode_lengths_hours)) / workload.concurrency
    results: dict[str, StrategyResult] = {}
    skipped: dict[str, str] = {}
    wanted = [s for s in STRATEGIES if s in strategies]

    # A cheap guard before simulating spot: the closed form's expected number of allocations.
    expected_allocations = 1 + closed_form(workload, tau=lifetimes.mean)["spot"].billed_hours / max(
        lifetimes.mean, 1e-12
    )
    too_many = (
        f"spot would need about {expected_allocations:,.0f} allocations per run "
        f"(more than {max_allocations:,} are not simulated)"
    )
    steady: _Outcome | None = None
    for name in wanted:
        why = _why_skipped(workload, name)
        if why is not None:
            skipped[name] = why
            continue
        if name in ("on_demand", "non_preemptible"):
            steady = steady or runner.run(name)
            price = prices.of(name)
            assert price is not None
            results[name] = _summary(
                price * steady.od_billed,
                steady.od_billed,
                steady,
                deadline,
                switched=False,
                work_per_episode=0.0,
            )
            continue
        if name == "spot" and expected_allocations > max_allocations / 2:
            skipped["spot"] = too_many
            continue
        try:
            o = runner.run(name)
        except _TooLong as err:
            skipped[name] = f"{name} runs too long to simulate: {err}"
            continue
        cost = prices.spot * o.spot_billed + (prices.on_demand or 0.0) * o.od_billed
        billed = o.spot_billed + o.od_billed
        switching = name in SWITCHING
        results[name] = _summary(cost, billed, o, deadline, switched=switching, work_per_episode=per_episode)
    uses_ticks = trace is not None or "uniform_progress" in results
    return Simulation(
        runs=runs,
        seed=seed,
        engine="ticks" if trace is not None else engine,
        lifetimes=lifetimes.describe(),
        waits=waits.describe(),
        boots=boots.describe(),
        strategies=results,
        skipped=skipped,
        ticks=runner.ticks_description() if uses_ticks else None,
    )
