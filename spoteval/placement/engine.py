"""The simulation's two engines (`lockstep` for one episode length, `events` for episode samples),
vectorised over runs with numpy; spoteval.placement.simulate describes the process and runs them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from spoteval.placement.samplers import BoolArray, FloatArray, IntArray, Sampler
from spoteval.placement.workload import Workload

_BLOCK: Final = 32


# --- random draws -------------------------------------------------------------------------------


class _Draws:
    """Lifetime, wait and boot of allocation k of every run, generated in blocks of allocations.

    Two `_Draws` built from the same seed give the same values for the same (run, k), whatever order
    they are read in, which is how every strategy and both engines see the same allocations (common
    random numbers). Blocks no run can need any more are released.
    """

    def __init__(
        self, runs: int, lifetimes: Sampler, waits: Sampler, boots: Sampler, seed: np.random.SeedSequence
    ) -> None:
        self.runs = runs
        self._samplers = (lifetimes, waits, boots)
        self._rng = np.random.default_rng(seed)
        self._generated = 0
        self._blocks: dict[int, tuple[FloatArray, FloatArray, FloatArray]] = {}

    def _ensure(self, block: int) -> None:
        while self._generated <= block:
            shape = (self.runs, _BLOCK)
            life, wait, boot = (s.sample(self._rng, shape) for s in self._samplers)
            self._blocks[self._generated] = (life, wait, boot)
            self._generated += 1

    def release_below(self, k: int) -> None:
        """Forget the blocks of allocations before k (no run will ask for them again)."""
        for block in [b for b in self._blocks if b < k // _BLOCK]:
            del self._blocks[block]

    def column(self, k: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Allocation k of every run."""
        block, col = divmod(k, _BLOCK)
        self._ensure(block)
        life, wait, boot = self._blocks[block]
        return life[:, col], wait[:, col], boot[:, col]

    def take(self, k: IntArray, rows: IntArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Allocation k[i] of run rows[i], for every i."""
        blocks, cols = np.divmod(k, _BLOCK)
        self._ensure(int(blocks.max()))
        out = (np.empty(k.size), np.empty(k.size), np.empty(k.size))
        for block in np.unique(blocks):
            sel = blocks == block
            for dest, src in zip(out, self._blocks[int(block)], strict=True):
                dest[sel] = src[rows[sel], cols[sel]]
        return out


@dataclass
class _Outcome:
    spot_billed: FloatArray
    od_billed: FloatArray
    wall: FloatArray
    switched: BoolArray
    preemptions: IntArray

    @classmethod
    def zeros(cls, runs: int) -> _Outcome:
        return cls(
            spot_billed=np.zeros(runs),
            od_billed=np.zeros(runs),
            wall=np.zeros(runs),
            switched=np.zeros(runs, dtype=np.bool_),
            preemptions=np.zeros(runs, dtype=np.int64),
        )


class _TooLong(Exception):
    pass


# --- engine: one episode length -----------------------------------------------------------------


def _run_lockstep(
    w: Workload,
    draws: _Draws,
    od_boot: FloatArray,
    *,
    reliable: bool,
    deadline: float | None,
    max_allocations: int,
) -> _Outcome:
    """All C slots in step: an allocation completes floor((L - B) / D) rounds of C episodes."""
    runs = draws.runs
    rounds = math.ceil(w.episodes / w.concurrency)
    length = w.episode_hours
    reserve = 2 * w.boot_hours
    out = _Outcome.zeros(runs)
    if reliable:
        out.od_billed[:] = od_boot + rounds * length
        out.wall[:] = out.od_billed
        return out

    t = np.zeros(runs)
    left_all = np.full(runs, float(rounds))
    active = np.arange(runs)
    k = 0
    while active.size:
        if k >= max_allocations:
            raise _TooLong(f"more than {max_allocations} allocations in a run")
        life_k, wait_k, boot_k = draws.column(k)
        life, boot = life_k[active], boot_k[active]
        start, left = t[active], left_all[active]
        switch_at = np.full(active.size, np.inf)
        if deadline is not None:
            # switch once the clock reaches `latest`: time left < remaining work + 2B
            latest = deadline - (left * length + reserve)
            in_wait = (latest < start + wait_k[active]) if k > 0 else np.zeros(active.size, dtype=np.bool_)
            switch_at = np.where(in_wait, np.maximum(start, latest), switch_at)
            if k > 0:
                start = np.where(in_wait, start, start + wait_k[active])
            # Progress at full speed keeps the slack constant, so if the switch does not come before
            # the first round ends it does not come during this allocation at all.
            at = np.maximum(start, latest)
            in_alloc = ~in_wait & (latest < start + boot + length) & (at < start + life)
            switch_at = np.where(in_alloc, at, switch_at)
            spot_part = np.where(in_alloc, at - start, 0.0)
        else:
            if k > 0:
                start = start + wait_k[active]
            spot_part = np.zeros(active.size)
        switched = np.isfinite(switch_at)
        rounds_done = np.floor(np.maximum(life - boot, 0.0) / length)
        finished = ~switched & (rounds_done >= left)
        preempted = ~switched & ~finished

        od_add = np.where(switched, od_boot[active] + left * length, 0.0)
        spot_add = np.where(finished, boot + left * length, np.where(preempted, life, spot_part))
        end = np.where(
            finished, start + boot + left * length, np.where(preempted, start + life, switch_at + od_add)
        )
        out.spot_billed[active] += spot_add
        out.od_billed[active] += od_add
        out.preemptions[active] += preempted
        out.switched[active] |= switched
        t[active] = end
        left_all[active] = np.where(preempted, left - rounds_done, left)
        done = finished | switched
        out.wall[active[done]] = end[done]
        active = active[~done]
        k += 1
    return out


# --- engine: episode samples --------------------------------------------------------------------


def _run_events(
    w: Workload,
    draws: _Draws,
    od_boot: FloatArray,
    episode_seed: np.random.SeedSequence,
    *,
    reliable: bool,
    deadline: float | None,
    max_allocations: int,
) -> _Outcome:
    """List scheduling of episodes on C slots, vectorised over runs, each run at its own pace.

    In each step, a run with enough unstarted episodes left that the order of its completions cannot
    matter completes every episode due before its allocation ends (the shortcut below). Every other
    run sorts its slots by finish time and completes, in that order, each episode that finishes
    before any episode started within the step could (its finish is known, since the next lengths
    are drawn first), before the allocation ends, and before the safety net switches; the i-th
    completion takes the i-th unstarted episode. Either way the result is that of handling one
    event at a time. A run whose allocation ends starts its next one (wait, lifetime, boot) in the
    same step.
    """
    runs = draws.runs
    slots = w.concurrency
    samples = np.asarray(w.episode_lengths_hours, dtype=np.float64)
    mean_length = float(samples.mean())
    min_length, max_length = float(samples.min()), float(samples.max())
    reserve = 2 * w.boot_hours
    rng = np.random.default_rng(episode_seed)
    max_steps = 20 * w.episodes + 10 * max_allocations
    rank = np.arange(slots)

    def draw(shape: tuple[int, ...]) -> FloatArray:
        return samples[rng.integers(0, samples.size, size=shape)]

    def latest_switch(left_n: FloatArray, work_sum: FloatArray) -> FloatArray:
        """The time at which the safety net switches: deadline - (remaining work + 2B)."""
        assert deadline is not None
        work = np.ceil(left_n / slots) * work_sum / np.maximum(left_n, 1)
        return deadline - (work + reserve)

    out = _Outcome.zeros(runs)
    # State of the unfinished runs (row i is run ids[i]).
    ids = np.arange(runs)
    held = np.zeros((runs, slots))  # length of the episode a slot runs or will restart; 0 = idle
    finish = np.full((runs, slots), np.inf)
    fresh = np.full(runs, w.episodes, dtype=np.int64)  # episodes never started
    left = np.full(runs, w.episodes, dtype=np.int64)  # episodes not completed
    hsum = np.zeros(runs)  # held.sum(axis=1)
    alloc = np.zeros(runs, dtype=np.int64)  # index of the current spot allocation
    on_demand = np.full(runs, reliable, dtype=np.bool_)
    start = np.zeros(runs)  # start of the current allocation (billing starts here)
    ends = np.zeros(runs)  # when the current allocation is taken back
    now = np.zeros(runs)  # time of the run's last event

    def begin(rows: IntArray, at: FloatArray, life: FloatArray, boot: FloatArray) -> None:
        """Start allocations at `at`: after the boot, held episodes restart, idle slots take new ones."""
        h = held[rows]
        idle = h == 0
        take = idle & (np.cumsum(idle, axis=1) <= fresh[rows][:, None])
        h = np.where(take, draw(h.shape), h)
        held[rows] = h
        fresh[rows] -= take.sum(axis=1)
        hsum[rows] = h.sum(axis=1)
        finish[rows] = np.where(h > 0, (at + boot)[:, None] + h, np.inf)
        ends[rows] = at + life
        now[rows] = at
        start[rows] = at

    def next_allocation(rows: IntArray, at: FloatArray) -> None:
        """After an allocation ended at `at`: on-demand starts at once; spot waits, maybe switches."""
        od = on_demand[rows]
        life = np.full(rows.size, np.inf)
        boot = od_boot[ids[rows]]
        at = at.copy()
        spot = rows[~od]
        if spot.size:
            if int(alloc[spot].max()) >= max_allocations:
                raise _TooLong(f"more than {max_allocations} allocations in a run")
            life_k, wait_k, boot_k = draws.take(alloc[spot], ids[spot])
            s = at[~od]
            if deadline is not None:
                latest = latest_switch(left[spot].astype(np.float64), hsum[spot] + fresh[spot] * mean_length)
                in_wait = latest < s + wait_k
                s = np.where(in_wait, np.maximum(s, latest), s + wait_k)
                on_demand[spot] |= in_wait
                out.switched[ids[spot]] |= in_wait
                life_k = np.where(in_wait, np.inf, life_k)
                boot_k = np.where(in_wait, od_boot[ids[spot]], boot_k)
            else:
                s = s + wait_k
            at[~od], life[~od], boot[~od] = s, life_k, boot_k
        begin(rows, at, life, boot)

    first = np.arange(runs)
    life0, _, boot0 = draws.take(alloc, ids)
    begin(first, np.zeros(runs), np.where(on_demand, np.inf, life0), np.where(on_demand, od_boot, boot0))

    steps = 0
    while ids.size:
        steps += 1
        if steps > max_steps:
            raise _TooLong(f"more than {max_steps} steps")
        m = ids.size
        rows = np.arange(m)

        # Shortcut, still exact: when every completion up to the last in-flight one before the end of
        # the allocation gets an unstarted episode, the order of completions changes nothing, so they
        # all complete in this step. `most` bounds the completions in that window: the in-flight ones,
        # plus, per slot, one per shortest length after its own completion. (The bound must not look
        # at lengths drawn for this step: choosing by them would keep long draws more often than
        # short ones.) With the safety net, only when the switch provably cannot come within the
        # window: each completion raises the remaining work's sum by at most max - min - mean, and
        # ceil(l / C) / l <= 1 / C + 1 / l.
        due = np.isfinite(finish) & (finish <= ends[:, None])
        n_time = due.sum(axis=1)
        last_in_time = np.where(due, finish, -np.inf).max(axis=1)
        after = np.where(due, last_in_time[:, None] - finish, 0.0)
        most = n_time + np.floor(after / min_length).sum(axis=1)
        relax = (n_time > 0) & (fresh >= most)
        if deadline is not None:
            spare = left - most
            rise = max(max_length - min_length - mean_length, 0.0)
            worst = (hsum + fresh * mean_length + most * rise) * (1 / slots + 1 / np.maximum(spare, 1))
            relax &= on_demand | ((spare > 0) & (deadline - (worst + reserve) >= last_in_time))
        if relax.any():
            # every due episode completes and its slot takes an unstarted one; nobody leaves
            due &= relax[:, None]
            new = np.where(due, draw((m, slots)), held)
            hsum += (new - held).sum(axis=1)
            finish = np.where(due, finish + new, finish)
            held = new
            taken_now = np.where(relax, n_time, 0)
            left -= taken_now
            fresh -= taken_now
            now = np.where(relax, np.maximum(now, last_in_time), now)
        xs = np.flatnonzero(~relax)
        if not xs.size:
            continue

        # The other runs: one event at a time, in order. A completion is taken only if it comes
        # before every episode started earlier in this step could finish, and before the safety net
        # switches.
        k = xs.size
        krows = np.arange(k)
        order = np.argsort(finish[xs], axis=1)
        cells = (xs[:, None], order)
        fs = finish[cells]
        hs = held[cells]
        fr, lf, hsx, endx = fresh[xs], left[xs], hsum[xs], ends[xs]
        gets = rank[None, :] < fr[:, None]  # the i-th completion takes the i-th unstarted episode
        new = np.where(gets, draw((k, slots)), 0.0)
        new_finish = np.where(gets, fs + new, np.inf)
        before = np.minimum.accumulate(new_finish, axis=1)
        bound = np.minimum(np.concatenate([np.full((k, 1), np.inf), before[:, :-1]], axis=1), endx[:, None])
        ok = np.logical_and.accumulate(np.isfinite(fs) & (fs <= bound), axis=1)
        n_ok = ok.sum(axis=1)
        n_proc = n_ok
        fire = np.zeros(k, dtype=np.bool_)
        latest = np.full(k, np.inf)
        if deadline is not None:
            # the state before the j-th completion of this step, for the switch rule
            taken: IntArray = np.cumsum(gets, axis=1) - gets
            left_j = lf[:, None] - rank[None, :]
            sum_j = (
                hsx[:, None]
                - (np.cumsum(hs, axis=1) - hs)
                + (np.cumsum(new, axis=1) - new)
                + (fr[:, None] - taken) * mean_length
            )
            latest_j = latest_switch(left_j.astype(np.float64), sum_j)
            latest_j = np.where(on_demand[xs][:, None], np.inf, latest_j)  # on-demand never switches
            checked = rank[None, :] < np.maximum(n_ok, 1)[:, None]
            fires = checked & (latest_j < np.minimum(fs, endx[:, None]))
            fire = fires.any(axis=1)
            first_fire = np.where(fire, fires.argmax(axis=1), slots)
            n_proc = np.minimum(n_ok, first_fire)
            latest = latest_j[krows, np.minimum(first_fire, slots - 1)]

        done = rank[None, :] < n_proc[:, None]
        if done.any():
            left[xs] -= n_proc
            fresh[xs] -= (gets & done).sum(axis=1)
            hsum[xs] += np.where(done, new - hs, 0.0).sum(axis=1)
            held[cells] = np.where(done, new, hs)
            finish[cells] = np.where(done, new_finish, fs)
            last_done = fs[krows, np.maximum(n_proc - 1, 0)]
            now[xs] = np.where(n_proc > 0, np.maximum(now[xs], last_done), now[xs])

        any_fire = np.zeros(m, dtype=np.bool_)
        any_fire[xs] = fire
        no_progress = np.zeros(m, dtype=np.bool_)
        no_progress[xs] = n_ok == 0
        switch_at = np.full(m, np.inf)
        switch_at[xs] = latest
        finished = left == 0
        switch = any_fire & ~finished
        preempt = ~finished & ~switch & no_progress
        leave = finished | switch | preempt
        if not leave.any():
            continue
        stop = np.where(finished, now, np.where(preempt, ends, np.maximum(now, switch_at)))
        lid = ids[leave]
        billed = (stop - start)[leave]
        od_leave = on_demand[leave]
        out.spot_billed[lid] += np.where(od_leave, 0.0, billed)
        out.od_billed[lid] += np.where(od_leave, billed, 0.0)
        out.preemptions[lid] += preempt[leave]
        out.switched[lid] |= switch[leave]
        out.wall[ids[finished]] = stop[finished]
        on_demand |= switch
        alloc += preempt
        again = rows[(switch | preempt)]
        if again.size:
            next_allocation(again, stop[again])
        if finished.any():
            keep = ~finished
            ids, held, finish, fresh, left = ids[keep], held[keep], finish[keep], fresh[keep], left[keep]
            hsum, alloc, on_demand = hsum[keep], alloc[keep], on_demand[keep]
            start, ends, now = start[keep], ends[keep], now[keep]
            if ids.size:
                draws.release_below(int(alloc.min()))
    return out
