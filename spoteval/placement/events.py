"""The `events` engine: list scheduling of episode samples on C slots, vectorised over runs, each run
at its own pace (spoteval.placement.simulate describes the process).

In each step, a run with enough unstarted episodes left that the order of its completions cannot
matter completes every episode due before its allocation ends (`_shortcut`). Every other run sorts
its slots by finish time and completes, in that order, each episode that finishes before any
episode started within the step could (its finish is known, since the next lengths are drawn
first), before the allocation ends, and before the safety net switches; the i-th completion takes
the i-th unstarted episode (`_in_order`). Either way the result is that of handling one event at a
time. A run whose allocation ends, or that switches, starts its next one (wait, lifetime, boot) in
the same step (`_leave`, `_next_allocation`).
"""

from __future__ import annotations

import numpy as np

from spoteval.placement.engine import _Draws, _Outcome, _TooLong
from spoteval.placement.samplers import BoolArray, FloatArray, IntArray
from spoteval.placement.workload import Workload


class _EventRuns:
    """The state of the unfinished runs (row i is run ids[i]) and the steps that move it."""

    def __init__(
        self,
        w: Workload,
        draws: _Draws,
        od_boot: FloatArray,
        episode_seed: np.random.SeedSequence,
        *,
        reliable: bool,
        deadline: float | None,
        max_allocations: int,
    ) -> None:
        runs = draws.runs
        self.w, self.draws, self.od_boot = w, draws, od_boot
        self.deadline, self.max_allocations = deadline, max_allocations
        self.slots = w.concurrency
        self.samples = np.asarray(w.episode_lengths_hours, dtype=np.float64)
        self.mean_length = float(self.samples.mean())
        self.min_length, self.max_length = float(self.samples.min()), float(self.samples.max())
        self.reserve = 2 * w.boot_hours
        self.rng = np.random.default_rng(episode_seed)
        self.rank = np.arange(self.slots)
        self.out = _Outcome.zeros(runs)
        self.ids = np.arange(runs)
        self.held = np.zeros((runs, self.slots))  # the episode a slot runs or will restart; 0 = idle
        self.finish = np.full((runs, self.slots), np.inf)
        self.fresh = np.full(runs, w.episodes, dtype=np.int64)  # episodes never started
        self.left = np.full(runs, w.episodes, dtype=np.int64)  # episodes not completed
        self.hsum = np.zeros(runs)  # held.sum(axis=1)
        self.alloc = np.zeros(runs, dtype=np.int64)  # index of the current spot allocation
        self.on_demand = np.full(runs, reliable, dtype=np.bool_)
        self.start = np.zeros(runs)  # start of the current allocation (billing starts here)
        self.ends = np.zeros(runs)  # when the current allocation is taken back
        self.now = np.zeros(runs)  # time of the run's last event

    def draw(self, shape: tuple[int, ...]) -> FloatArray:
        out: FloatArray = self.samples[self.rng.integers(0, self.samples.size, size=shape)]
        return out

    def work_left(self, left_n: FloatArray, work_sum: FloatArray) -> FloatArray:
        """The work left at on-demand speed: ceil(left / C) rounds of the remaining episodes' mean."""
        out: FloatArray = np.ceil(left_n / self.slots) * work_sum / np.maximum(left_n, 1)
        return out

    def latest_switch(self, left_n: FloatArray, work_sum: FloatArray) -> FloatArray:
        """The time at which the safety net switches: deadline - (remaining work + 2B)."""
        assert self.deadline is not None
        out: FloatArray = self.deadline - (self.work_left(left_n, work_sum) + self.reserve)
        return out

    def begin(self, rows: IntArray, at: FloatArray, life: FloatArray, boot: FloatArray) -> None:
        """Start allocations at `at`: after the boot, held episodes restart, idle slots take new ones."""
        h = self.held[rows]
        idle = h == 0
        take = idle & (np.cumsum(idle, axis=1) <= self.fresh[rows][:, None])
        h = np.where(take, self.draw(h.shape), h)
        self.held[rows] = h
        self.fresh[rows] -= take.sum(axis=1)
        self.hsum[rows] = h.sum(axis=1)
        self.finish[rows] = np.where(h > 0, (at + boot)[:, None] + h, np.inf)
        self.ends[rows] = at + life
        self.now[rows] = at
        self.start[rows] = at

    def _switch_record(self, rows: IntArray, at: FloatArray) -> None:
        """The first switch to on-demand of runs `rows`, at `at`: what was done on spot, what is left."""
        ids = self.ids[rows]
        self.out.switched[ids] = True
        self.out.spot_done[ids] = self.w.episodes - self.left[rows]
        self.out.switch_at[ids] = at
        work_sum = self.hsum[rows] + self.fresh[rows] * self.mean_length
        self.out.switch_left[ids] = self.work_left(self.left[rows].astype(np.float64), work_sum)

    def next_allocation(self, rows: IntArray, at: FloatArray) -> None:
        """After an allocation ended at `at`: on-demand starts at once; spot waits, maybe switches."""
        od = self.on_demand[rows]
        life = np.full(rows.size, np.inf)
        boot = self.od_boot[self.ids[rows]]
        at = at.copy()
        spot = rows[~od]
        if spot.size:
            if int(self.alloc[spot].max()) >= self.max_allocations:
                raise _TooLong(f"more than {self.max_allocations} allocations in a run")
            life_k, wait_k, boot_k = self.draws.take(self.alloc[spot], self.ids[spot])
            s = at[~od]
            if self.deadline is not None:
                work_sum = self.hsum[spot] + self.fresh[spot] * self.mean_length
                latest = self.latest_switch(self.left[spot].astype(np.float64), work_sum)
                in_wait = latest < s + wait_k
                s = np.where(in_wait, np.maximum(s, latest), s + wait_k)
                self.on_demand[spot] |= in_wait
                if in_wait.any():
                    self._switch_record(spot[in_wait], s[in_wait])
                life_k = np.where(in_wait, np.inf, life_k)
                boot_k = np.where(in_wait, self.od_boot[self.ids[spot]], boot_k)
            else:
                s = s + wait_k
            at[~od], life[~od], boot[~od] = s, life_k, boot_k
        self.begin(rows, at, life, boot)

    def _shortcut(self) -> BoolArray:
        """Runs whose due completions all get an unstarted episode complete them all at once.

        Still exact: when every completion up to the last in-flight one before the end of the
        allocation gets an unstarted episode, the order of completions changes nothing. `most`
        bounds the completions in that window: the in-flight ones, plus, per slot, one per shortest
        length after its own completion. (The bound must not look at lengths drawn for this step:
        choosing by them would keep long draws more often than short ones.) With the safety net,
        only when the switch provably cannot come within the window: each completion raises the
        remaining work's sum by at most max - min - mean, and ceil(l / C) / l <= 1 / C + 1 / l.
        Returns the runs it handled.
        """
        m = self.ids.size
        due = np.isfinite(self.finish) & (self.finish <= self.ends[:, None])
        n_time = due.sum(axis=1)
        last_in_time = np.where(due, self.finish, -np.inf).max(axis=1)
        after = np.where(due, last_in_time[:, None] - self.finish, 0.0)
        most = n_time + np.floor(after / self.min_length).sum(axis=1)
        relax: BoolArray = (n_time > 0) & (self.fresh >= most)
        if self.deadline is not None:
            spare = self.left - most
            rise = max(self.max_length - self.min_length - self.mean_length, 0.0)
            worst = (self.hsum + self.fresh * self.mean_length + most * rise) * (
                1 / self.slots + 1 / np.maximum(spare, 1)
            )
            relax &= self.on_demand | ((spare > 0) & (self.deadline - (worst + self.reserve) >= last_in_time))
        if relax.any():
            # every due episode completes and its slot takes an unstarted one; nobody leaves
            due &= relax[:, None]
            new = np.where(due, self.draw((m, self.slots)), self.held)
            self.hsum += (new - self.held).sum(axis=1)
            self.finish = np.where(due, self.finish + new, self.finish)
            self.held = new
            taken_now = np.where(relax, n_time, 0)
            self.left -= taken_now
            self.fresh -= taken_now
            self.now = np.where(relax, np.maximum(self.now, last_in_time), self.now)
        return relax

    def _in_order(self, xs: IntArray) -> tuple[BoolArray, BoolArray, FloatArray]:
        """Runs `xs`: one event at a time, in order. A completion is taken only if it comes before
        every episode started earlier in this step could finish, and before the safety net switches.
        Returns, per run of xs, whether the safety net fires, whether nothing completed, and when
        the switch comes."""
        k = xs.size
        krows = np.arange(k)
        rank, slots = self.rank, self.slots
        order = np.argsort(self.finish[xs], axis=1)
        cells = (xs[:, None], order)
        fs, hs = self.finish[cells], self.held[cells]
        fr, lf, hsx, endx = self.fresh[xs], self.left[xs], self.hsum[xs], self.ends[xs]
        gets = rank[None, :] < fr[:, None]  # the i-th completion takes the i-th unstarted episode
        new = np.where(gets, self.draw((k, slots)), 0.0)
        new_finish = np.where(gets, fs + new, np.inf)
        before = np.minimum.accumulate(new_finish, axis=1)
        bound = np.minimum(np.concatenate([np.full((k, 1), np.inf), before[:, :-1]], axis=1), endx[:, None])
        ok = np.logical_and.accumulate(np.isfinite(fs) & (fs <= bound), axis=1)
        n_ok = ok.sum(axis=1)
        n_proc = n_ok
        fire = np.zeros(k, dtype=np.bool_)
        latest = np.full(k, np.inf)
        if self.deadline is not None:
            # the state before the j-th completion of this step, for the switch rule
            taken: IntArray = np.cumsum(gets, axis=1) - gets
            left_j = lf[:, None] - rank[None, :]
            sum_j = (
                hsx[:, None]
                - (np.cumsum(hs, axis=1) - hs)
                + (np.cumsum(new, axis=1) - new)
                + (fr[:, None] - taken) * self.mean_length
            )
            latest_j = self.latest_switch(left_j.astype(np.float64), sum_j)
            latest_j = np.where(self.on_demand[xs][:, None], np.inf, latest_j)  # on-demand never switches
            checked = rank[None, :] < np.maximum(n_ok, 1)[:, None]
            fires = checked & (latest_j < np.minimum(fs, endx[:, None]))
            fire = fires.any(axis=1)
            first_fire = np.where(fire, fires.argmax(axis=1), slots)
            n_proc = np.minimum(n_ok, first_fire)
            latest = latest_j[krows, np.minimum(first_fire, slots - 1)]

        done = rank[None, :] < n_proc[:, None]
        if done.any():
            self.left[xs] -= n_proc
            self.fresh[xs] -= (gets & done).sum(axis=1)
            self.hsum[xs] += np.where(done, new - hs, 0.0).sum(axis=1)
            self.held[cells] = np.where(done, new, hs)
            self.finish[cells] = np.where(done, new_finish, fs)
            last_done = fs[krows, np.maximum(n_proc - 1, 0)]
            self.now[xs] = np.where(n_proc > 0, np.maximum(self.now[xs], last_done), self.now[xs])
        return fire, n_ok == 0, latest

    def _leave(self, xs: IntArray, fire: BoolArray, stuck: BoolArray, latest: FloatArray) -> None:
        """Runs that finished, switch to on-demand or were preempted end their allocation; the ones
        with work left start the next one; finished runs leave the state."""
        m = self.ids.size
        rows = np.arange(m)
        any_fire = np.zeros(m, dtype=np.bool_)
        any_fire[xs] = fire
        no_progress = np.zeros(m, dtype=np.bool_)
        no_progress[xs] = stuck
        switch_at = np.full(m, np.inf)
        switch_at[xs] = latest
        finished = self.left == 0
        switch = any_fire & ~finished
        preempt = ~finished & ~switch & no_progress
        leave = finished | switch | preempt
        if not leave.any():
            return
        stop = np.where(finished, self.now, np.where(preempt, self.ends, np.maximum(self.now, switch_at)))
        lid = self.ids[leave]
        billed = (stop - self.start)[leave]
        od_leave = self.on_demand[leave]
        out = self.out
        out.spot_billed[lid] += np.where(od_leave, 0.0, billed)
        out.od_billed[lid] += np.where(od_leave, billed, 0.0)
        out.preemptions[lid] += preempt[leave]
        if switch.any():
            self._switch_record(rows[switch], stop[switch])
        spot_finish = finished & ~self.on_demand & ~out.switched[self.ids]
        out.spot_done[self.ids[spot_finish]] = self.w.episodes
        out.wall[self.ids[finished]] = stop[finished]
        self.on_demand |= switch
        self.alloc += preempt
        again = rows[(switch | preempt)]
        if again.size:
            self.next_allocation(again, stop[again])
        if finished.any():
            self._drop(~finished)

    def _drop(self, keep: BoolArray) -> None:
        for name in ("ids", "held", "finish", "fresh", "left", "hsum", "alloc", "on_demand"):
            setattr(self, name, getattr(self, name)[keep])
        self.start, self.ends, self.now = self.start[keep], self.ends[keep], self.now[keep]
        if self.ids.size:
            self.draws.release_below(int(self.alloc.min()))

    def run(self) -> _Outcome:
        runs = self.ids.size
        life0, _, boot0 = self.draws.take(self.alloc, self.ids)
        od = self.on_demand
        self.begin(
            np.arange(runs), np.zeros(runs), np.where(od, np.inf, life0), np.where(od, self.od_boot, boot0)
        )
        max_steps = 20 * self.w.episodes + 10 * self.max_allocations
        steps = 0
        while self.ids.size:
            steps += 1
            if steps > max_steps:
                raise _TooLong(f"more than {max_steps} steps")
            relax = self._shortcut()
            xs = np.flatnonzero(~relax)
            if not xs.size:
                continue
            fire, stuck, latest = self._in_order(xs)
            self._leave(xs, fire, stuck, latest)
        return self.out


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
    """List scheduling of episodes on C slots (see the module docstring)."""
    runs = _EventRuns(
        w, draws, od_boot, episode_seed, reliable=reliable, deadline=deadline, max_allocations=max_allocations
    )
    return runs.run()
