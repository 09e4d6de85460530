"""The tick engine: the deadline policies of spoteval.placement.policies, decided tick by tick over spot
capacity that changes at tick boundaries (a trace replayed in order, or the drawn lifetimes laid end
to end: spoteval.placement.availability), as the simulator of "Can't Be Late" (NSDI 2024) decides.

At the start of every tick of G hours, for every run at once: a spot node whose up-run has ended
was preempted (at the end of that up-run, in the tick before); the policy picks the market for the
tick (idle, spot if capacity is up, on-demand); a change of market starts a new node, which boots
for B (billed; its episodes in flight restart on it) and leaving a node loses the episodes in flight
on it. Then the tick runs: the node boots, then works, until the tick ends, the job is done, or the
spot up-run ends. Billing is per hour of a node, from its start to its end or the job's.

The work is that of spoteval.placement.simulate: N episodes on C slots. One episode length runs in
step (`_Rounds`: an allocation completes rounds of C episodes; the round in flight is lost with the
node); episode samples run list scheduling (`_Slots`: each freed slot takes the next unstarted
episode, completions in time order), with the same remaining-work estimate as the event engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from spoteval.placement.availability import Availability
from spoteval.placement.engine import _Outcome, _TooLong
from spoteval.placement.policies import IDLE, ON_DEMAND, SPOT, step
from spoteval.placement.samplers import BoolArray, FloatArray, IntArray
from spoteval.placement.workload import Workload

#: a small tolerance for completions that land on a tick boundary (times are sums of floats)
_EPS: Final = 1e-9


# --- the work: one length in step, or samples by list scheduling ------------------------------


class _Rounds:
    """C slots in step: `left` rounds of D; `into` the time spent on the round in flight."""

    def __init__(self, runs: int, w: Workload) -> None:
        self.length = w.episode_hours
        self.rounds = math.ceil(w.episodes / w.concurrency)
        self.episodes = w.episodes
        self.slots = w.concurrency
        self.left = np.full(runs, float(self.rounds))
        self.into = np.zeros(runs)

    @property
    def total(self) -> float:
        return self.rounds * self.length

    def work_left(self, rows: IntArray) -> FloatArray:
        out: FloatArray = self.left[rows] * self.length
        return out

    def lose(self, rows: IntArray) -> None:
        self.into[rows] = 0.0

    def begin(self, rows: IntArray, at: FloatArray) -> None:
        """A node starts working at `at` (nothing to do: its first round starts with `advance`)."""

    def advance(
        self, rows: IntArray, start: FloatArray, end: FloatArray
    ) -> tuple[BoolArray, FloatArray, FloatArray]:
        """Work from `start` to `end`: whether the job finished, when, and the episodes it completed."""
        into = self.into[rows]
        total = into + np.maximum(end - start, 0.0)
        left = self.left[rows]
        rounds = np.floor(total / self.length + _EPS)
        finished = rounds >= left
        at = np.where(finished, start + left * self.length - into, np.inf)
        after = np.where(finished, 0.0, left - rounds)
        self.left[rows] = after
        self.into[rows] = np.where(finished, 0.0, np.maximum(total - rounds * self.length, 0.0))
        done_before = np.minimum((self.rounds - left) * self.slots, self.episodes)
        gained: FloatArray = np.minimum((self.rounds - after) * self.slots, self.episodes) - done_before
        return finished, at, gained


class _Slots:
    """C slots taking episodes from one queue (list scheduling); lengths drawn from the samples."""

    def __init__(self, runs: int, w: Workload, rng: np.random.Generator) -> None:
        self.samples = np.asarray(w.episode_lengths_hours, dtype=np.float64)
        self.mean = float(self.samples.mean())
        self.slots = w.concurrency
        self.episodes = w.episodes
        self._rng = rng
        self.held = np.zeros((runs, self.slots))  # the episode a slot runs or will restart; 0 = idle
        self.finish = np.full((runs, self.slots), np.inf)
        self.fresh = np.full(runs, w.episodes, dtype=np.int64)
        self.left = np.full(runs, w.episodes, dtype=np.int64)

    @property
    def total(self) -> float:
        return math.ceil(self.episodes / self.slots) * self.mean

    def _draw(self, shape: tuple[int, ...]) -> FloatArray:
        out: FloatArray = self.samples[self._rng.integers(0, self.samples.size, size=shape)]
        return out

    def work_left(self, rows: IntArray) -> FloatArray:
        left = self.left[rows].astype(np.float64)
        mean_left = (self.held[rows].sum(axis=1) + self.fresh[rows] * self.mean) / np.maximum(left, 1)
        out: FloatArray = np.ceil(left / self.slots) * mean_left
        return out

    def lose(self, rows: IntArray) -> None:
        self.finish[rows] = np.inf

    def begin(self, rows: IntArray, at: FloatArray) -> None:
        """A node starts working at `at`: held episodes restart, idle slots take unstarted ones."""
        h = self.held[rows]
        idle = h == 0
        take = idle & (np.cumsum(idle, axis=1) <= self.fresh[rows][:, None])
        h = np.where(take, self._draw(h.shape), h)
        self.held[rows] = h
        self.fresh[rows] -= take.sum(axis=1)
        self.finish[rows] = np.where(h > 0, at[:, None] + h, np.inf)

    def advance(
        self, rows: IntArray, start: FloatArray, end: FloatArray
    ) -> tuple[BoolArray, FloatArray, FloatArray]:
        """Complete, in time order, every episode that finishes by `end`; each freed slot takes the next
        unstarted episode. A completion is taken in a pass only if it comes before any episode started
        in that pass could finish, so the passes give the order of one event at a time."""
        last = np.full(rows.size, -np.inf)
        left_before = self.left[rows].copy()
        rank = np.arange(self.slots)
        todo = np.arange(rows.size)
        while todo.size:
            r = rows[todo]
            order = np.argsort(self.finish[r], axis=1)
            cells = (r[:, None], order)
            fs, hs = self.finish[cells], self.held[cells]
            gets = rank[None, :] < self.fresh[r][:, None]
            new = np.where(gets, self._draw(fs.shape), 0.0)
            new_finish = np.where(gets, fs + new, np.inf)
            before = np.minimum.accumulate(new_finish, axis=1)
            bound = np.minimum(
                np.concatenate([np.full((r.size, 1), np.inf), before[:, :-1]], axis=1), end[todo, None]
            )
            ok = np.logical_and.accumulate(np.isfinite(fs) & (fs <= bound + _EPS), axis=1)
            n = ok.sum(axis=1)
            self.left[r] -= n
            self.fresh[r] -= (gets & ok).sum(axis=1)
            self.held[cells] = np.where(ok, new, hs)
            self.finish[cells] = np.where(ok, new_finish, fs)
            last[todo] = np.where(
                n > 0, np.maximum(last[todo], fs[np.arange(r.size), np.maximum(n - 1, 0)]), last[todo]
            )
            todo = todo[(n > 0) & (self.left[r] > 0)]
        finished = self.left[rows] == 0
        gained: FloatArray = (left_before - self.left[rows]).astype(np.float64)
        return finished, np.where(finished, last, np.inf), gained


# --- the tick loop --------------------------------------------------------------------------------


@dataclass
class _Runs:
    """The state of the unfinished runs (row i is run ids[i])."""

    ids: IntArray
    market: IntArray
    forced: BoolArray
    boot_left: FloatArray
    working: BoolArray  # the node's boot is over and its slots have their episodes
    alloc_end: FloatArray  # when the spot node's up-run ends (inf on-demand)

    @classmethod
    def start(cls, runs: int) -> _Runs:
        return cls(
            ids=np.arange(runs),
            market=np.full(runs, IDLE, dtype=np.int64),
            forced=np.zeros(runs, dtype=np.bool_),
            boot_left=np.zeros(runs),
            working=np.zeros(runs, dtype=np.bool_),
            alloc_end=np.full(runs, np.inf),
        )

    def keep(self, rows: BoolArray) -> None:
        for name in ("ids", "market", "forced", "boot_left", "working", "alloc_end"):
            setattr(self, name, getattr(self, name)[rows])


def run_ticks(
    w: Workload,
    availability: Availability,
    policy: str,
    od_boot: FloatArray,
    episode_seed: np.random.SeedSequence,
    *,
    deadline: float | None,
    max_ticks: int = 200_000,
    timeline: list[tuple[float, str]] | None = None,
) -> _Outcome:
    """`policy` on every run of `availability` (see the module docstring). `timeline`, when given,
    receives run 0's changes of market: (time, "spot" | "on_demand" | "idle")."""
    runs = od_boot.size
    tick = availability.tick_hours
    work: _Rounds | _Slots = (
        _Slots(runs, w, np.random.default_rng(episode_seed)) if w.episode_samples_hours else _Rounds(runs, w)
    )
    total = work.total
    out = _Outcome.zeros(runs)
    s = _Runs.start(runs)
    for k in range(max_ticks):
        if not s.ids.size:
            return out
        t = k * tick
        up, up_end = availability.state(s.ids, k)
        left = work.work_left(s.ids)
        new, s.forced = step(
            policy,
            market=s.market,
            up=up,
            forced=s.forced,
            elapsed=t,
            work_left=left,
            work_total=total,
            deadline=deadline,
            boot=w.boot_hours,
            tick=tick,
        )
        if timeline is not None:
            _watch(timeline, s, new, t)
        _change(
            s,
            work=work,
            out=out,
            new=new,
            availability=availability,
            od_boot=od_boot,
            up_end=up_end,
            t=t,
            left=left,
        )
        done = _run_tick(s, work, out, t, tick)
        if done.any():
            s.keep(~done)
    raise _TooLong(f"more than {max_ticks} ticks of {tick:g} h in a run")


_NAMES: Final = {IDLE: "idle", SPOT: "spot", ON_DEMAND: "on_demand"}


def _watch(timeline: list[tuple[float, str]], s: _Runs, new: IntArray, t: float) -> None:
    first = np.flatnonzero(s.ids == 0)
    if first.size:
        market = _NAMES[int(new[first[0]])]
        if not timeline or timeline[-1][1] != market:
            timeline.append((t, market))


def _change(
    s: _Runs,
    *,
    work: _Rounds | _Slots,
    out: _Outcome,
    new: IntArray,
    availability: Availability,
    od_boot: FloatArray,
    up_end: FloatArray,
    t: float,
    left: FloatArray,
) -> None:
    """Leave the old node (its episodes in flight are lost) and start the new one (its boot)."""
    change = new != s.market
    if not change.any():
        return
    leave = s.ids[change & (s.market != IDLE)]
    work.lose(leave)
    come = change & (new != IDLE)
    spot = come & (new == SPOT)
    od = come & (new == ON_DEMAND)
    s.boot_left = np.where(come, 0.0, s.boot_left)
    if spot.any():
        s.boot_left[spot] = availability.boot(s.ids[spot])
    if od.any():
        s.boot_left[od] = od_boot[s.ids[od]]
        first = od & np.isnan(out.switch_at[s.ids])
        out.switch_at[s.ids[first]] = t
        out.switch_left[s.ids[first]] = left[first]
        out.switched[s.ids[od]] = True
    s.alloc_end = np.where(spot, up_end, np.where(come, np.inf, s.alloc_end))
    s.working = np.where(change, False, s.working)
    s.market = new


def _run_tick(s: _Runs, work: _Rounds | _Slots, out: _Outcome, t: float, tick: float) -> BoolArray:
    """The tick [t, t + G) of every run on a node: boot, work, bill; a spot up-run ending in it is a
    preemption. Returns which rows finished the job."""
    on = s.market != IDLE
    finished = np.zeros(s.ids.size, dtype=np.bool_)
    if not on.any():
        return finished
    rows = np.flatnonzero(on)
    ids = s.ids[rows]
    end = np.minimum(t + tick, s.alloc_end[rows])
    boot_used = np.minimum(s.boot_left[rows], np.maximum(end - t, 0.0))
    go = t + boot_used
    s.boot_left[rows] -= boot_used
    ready = s.boot_left[rows] <= _EPS
    starting = ready & ~s.working[rows]
    if starting.any():
        work.begin(ids[starting], go[starting])
        s.working[rows[starting]] = True
    busy = ready & (go < end)
    done = np.zeros(rows.size, dtype=np.bool_)
    at = np.full(rows.size, np.inf)
    if busy.any():
        working = ids[busy]
        fin, when, gained = work.advance(working, go[busy], end[busy])
        done[busy], at[busy] = fin, when
        on_spot = s.market[rows[busy]] == SPOT
        out.spot_done[working[on_spot]] += gained[on_spot]
    until = np.where(done, at, end)
    spot = s.market[rows] == SPOT
    out.spot_billed[ids[spot]] += (until - t)[spot]
    out.od_billed[ids[~spot]] += (until - t)[~spot]
    out.wall[ids[done]] = at[done]
    preempted = spot & ~done & (s.alloc_end[rows] <= t + tick + _EPS)
    if preempted.any():
        lost = rows[preempted]
        work.lose(s.ids[lost])
        out.preemptions[s.ids[lost]] += 1
        s.market[lost] = IDLE
        s.working[lost] = False
        s.alloc_end[lost] = np.inf
    finished[rows] = done
    return finished
