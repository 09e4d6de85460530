"""What the simulation's engines share (the random draws of allocations, the per-run outcome) and the
`lockstep` engine for one episode length; the `events` engine for episode samples is in
spoteval.placement.events, the tick engine of the deadline policies in spoteval.placement.ticks.
All are vectorised over runs with numpy; spoteval.placement.simulate describes the process and runs
them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from spoteval.placement.samplers import BoolArray, FloatArray, IntArray, Sampler
from spoteval.placement.workload import Workload

_BLOCK: Final = 32
BLOCK: Final = _BLOCK  # allocations per block of draws (for subclasses)


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
            self._blocks[self._generated] = self._block(self._generated)
            self._generated += 1

    def _block(self, block: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Allocations block x 32 ... block x 32 + 31 of every run, as (runs, 32) arrays."""
        shape = (self.runs, _BLOCK)
        life, wait, boot = (s.sample(self._rng, shape) for s in self._samplers)
        return life, wait, boot

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
    """Per run: hours billed on each market, wall time, whether it went on-demand, preemptions, the
    episodes completed on spot, and the first switch to on-demand (its time and the work left then,
    in hours at on-demand speed; NaN for a run that never switched)."""

    spot_billed: FloatArray
    od_billed: FloatArray
    wall: FloatArray
    switched: BoolArray
    preemptions: IntArray
    spot_done: FloatArray
    switch_at: FloatArray
    switch_left: FloatArray

    @classmethod
    def zeros(cls, runs: int) -> _Outcome:
        return cls(
            spot_billed=np.zeros(runs),
            od_billed=np.zeros(runs),
            wall=np.zeros(runs),
            switched=np.zeros(runs, dtype=np.bool_),
            preemptions=np.zeros(runs, dtype=np.int64),
            spot_done=np.zeros(runs),
            switch_at=np.full(runs, np.nan),
            switch_left=np.full(runs, np.nan),
        )

    @classmethod
    def pool(cls, nodes: list[_Outcome]) -> _Outcome:
        """k nodes sharing a queue: bills and episodes add up, the wall time is the slowest node's, the
        first switch is the earliest of any node (with that node's work left)."""
        at = np.stack([o.switch_at for o in nodes])
        first = np.argmin(np.where(np.isnan(at), np.inf, at), axis=0)
        cols = np.arange(at.shape[1])
        return cls(
            spot_billed=np.sum([o.spot_billed for o in nodes], axis=0),
            od_billed=np.sum([o.od_billed for o in nodes], axis=0),
            wall=np.max([o.wall for o in nodes], axis=0),
            switched=np.any([o.switched for o in nodes], axis=0),
            preemptions=np.sum([o.preemptions for o in nodes], axis=0),
            spot_done=np.sum([o.spot_done for o in nodes], axis=0),
            switch_at=at[first, cols],
            switch_left=np.stack([o.switch_left for o in nodes])[first, cols],
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
        rounds_on_spot = np.where(finished, rounds, rounds - left)
        out.spot_done[active[finished | switched]] = np.minimum(rounds_on_spot * w.concurrency, w.episodes)[
            finished | switched
        ]
        out.switch_at[active[switched]] = switch_at[switched]
        out.switch_left[active[switched]] = (left * length)[switched]
        t[active] = end
        left_all[active] = np.where(preempted, left - rounds_done, left)
        done = finished | switched
        out.wall[active[done]] = end[done]
        active = active[~done]
        k += 1
    return out
