"""Spot capacity over time, for the tick engine (spoteval.placement.ticks): a trace replayed in order,
or the simulation's drawn lifetimes and waits laid end to end.

Trace files (`{"metadata": {"gap_seconds": G}, "data": [v0, v1, ...]}`, one value per tick of G
seconds; the spot traces of Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under
Deadlines", NSDI 2024, in tests/data/traces/) come in two kinds, named by the folder they are
published in: `availability/...` (a spot instance launched and terminated every 10 minutes, as a
probe) and `preemption/...` (spot instances kept running). In both, the published value is the
number of instances available or running at the tick (the source's README: "each data point is the
number of available instances"; its author on the preemption traces, spot-traces issue 1: "0 and 1
indicate the number of the available spot instances at the timestamp"): a 1-node trace is 1 or 0, a
16-node trace counts 0-16. Checked against the data:

- availability: the collector's raw log records `fail` = 1 when the probe could not launch, and the
  published files are exactly 1 - fail, tick for tick, for all eight files of aws-10-26-2022; the
  2023 files equal the collector's `availability` column (1 = available);
- preemption: the files start at 0 (no instance yet) and the paper's real-workload traces have
  "spot availabilities ranging from 70% to 90%" (section 7.2): read as 1 = running, the V100 trace
  of us-west-2b it used for ML training is up 79% of its ticks (read the other way, 21%, which would
  leave its reported 48% saving out of reach), and three GCP files are never preempted in 2 days
  (the other way: never running).

The paper's simulator reads its own internal files the other way round (`not trace[tick]`: 1 =
preempted) and converts the published ones before reading them. So a tick is *up* (spot capacity
there) when the value is >= 1, and for node j of a pool on a multi-node trace when it is > j; a file
in the simulator's internal convention is read with `reading="preempted"` (up where the value is 0).

Ordered replay (`TraceAvailability`): run r starts at tick `offset_r` of the trace (seeded, uniform
over the ticks from which the deadline still fits in the trace) and sees the trace's ticks in order
from there, wrapping round to the start if it runs past the end. Spot capacity is there for the
whole of an up tick and gone for the whole of a down tick; an allocation started in an up-run is
preempted where the run ends. Drawn availability (`DrawnAvailability`): up for L_0 from time 0, down
for W_1, up for L_1, ... with L_k, W_k, B_k allocation k's draws (the draws every engine shares).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Final, Protocol

import numpy as np

from spoteval.placement.engine import BLOCK, _Draws, _TooLong
from spoteval.placement.samplers import BoolArray, FloatArray, IntArray, Sampler
from spoteval.placement.workload import PlacementError

TRACE_KINDS: Final = ("availability", "preemption")
#: how a trace's values read: the number of instances up (the published files), or non-zero when no
#: capacity is there (the paper's simulator's internal files)
TRACE_READINGS: Final = ("count", "preempted")
#: how a trace's availability is used: replayed in order, or its runs drawn independently
REPLAY_MODES: Final = ("ordered", "draw")


# --- trace files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """A trace file's ticks and how to read them."""

    source: str
    gap_seconds: float
    kind: str  # availability, preemption, or trace (a folder that names neither)
    values: tuple[float, ...]
    reading: str = "count"

    @cached_property
    def _array(self) -> FloatArray:
        return np.asarray(self.values, dtype=np.float64)

    @property
    def ticks(self) -> int:
        return len(self.values)

    @property
    def tick_hours(self) -> float:
        return self.gap_seconds / 3600.0

    @property
    def counts(self) -> bool:
        """A multi-node trace: each value counts the instances available or running."""
        return self.reading == "count" and float(self._array.max()) > 1

    def up(self, node: int = 0) -> BoolArray:
        """Whether spot capacity is there at each tick for node `node` (see the module docstring)."""
        if self.reading == "preempted":
            up: BoolArray = self._array == 0
        else:
            up = self._array >= (node + 1 if self.counts else 1)
        return up

    def describe(self) -> str:
        up = float(self.up().mean())
        return f"{self.kind} trace {self.source} ({self.ticks} ticks of {self.gap_seconds:g} s, {up:.0%} up)"


def trace_kind(path: str | Path) -> str:
    """The kind of the trace at `path`, from the folder it is published in (it does not change how
    its values read): `availability`, `preemption`, or `trace` when no folder names one."""
    found = [kind for kind in TRACE_KINDS if kind in Path(path).parts]
    return found[0] if len(found) == 1 else "trace"


def read_trace_file(path: str | Path, reading: str = "count") -> Trace:
    """Read a trace file (`reading`: one of TRACE_READINGS). Errors name the file and the problem."""
    if reading not in TRACE_READINGS:
        raise PlacementError("--trace-values", f"must be one of {', '.join(TRACE_READINGS)}, got {reading!r}")
    path = Path(path)
    key = str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlacementError(key, "trace file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PlacementError(key, f"cannot read the trace: {err}") from None
    except json.JSONDecodeError as err:
        raise PlacementError(key, f"malformed JSON at line {err.lineno} column {err.colno}") from None
    if not isinstance(doc, dict):
        raise PlacementError(key, "a trace must be a JSON object with metadata.gap_seconds and data")
    meta = doc.get("metadata")
    gap = meta.get("gap_seconds") if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not math.isfinite(gap) or gap <= 0:
        raise PlacementError(f"{key}: metadata.gap_seconds", f"must be a number > 0, got {gap!r}")
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        raise PlacementError(f"{key}: data", "must be a non-empty list of ticks")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in data):
        raise PlacementError(f"{key}: data", "ticks must be numbers >= 0")
    values = tuple(float(v) for v in data)
    return Trace(source=key, gap_seconds=float(gap), kind=trace_kind(path), values=values, reading=reading)


# --- what the tick engine asks ------------------------------------------------------------------


class Availability(Protocol):
    """Spot capacity over time for every run, asked at tick boundaries."""

    @property
    def tick_hours(self) -> float: ...

    def state(self, ids: IntArray, tick: int) -> tuple[BoolArray, FloatArray]:
        """For runs `ids` at the start of `tick`: whether spot is up, and when that up-run ends (hours)."""
        ...

    def boot(self, ids: IntArray) -> FloatArray:
        """The boot of a spot allocation the runs `ids` start now (hours)."""
        ...

    def describe(self) -> str: ...


def _cyclic_run_left(up: BoolArray) -> FloatArray:
    """For each tick, how many ticks (itself included) until the value changes, reading the trace as a
    cycle; infinite for a trace that never changes."""
    n = up.size
    if bool(up.all()) or not bool(up.any()):
        return np.full(n, np.inf)
    doubled = np.concatenate([up, up])
    change = np.flatnonzero(doubled[1:] != doubled[:-1]) + 1  # positions where a new run begins
    nxt = change[np.searchsorted(change, np.arange(n), side="right")]
    return (nxt - np.arange(n)).astype(np.float64)


class TraceAvailability:
    """A trace replayed in order from a seeded start tick per run (see the module docstring)."""

    def __init__(
        self,
        trace: Trace,
        runs: int,
        seed: np.random.SeedSequence,
        *,
        node: int = 0,
        window_hours: float = 0.0,
        boots: Sampler,
        offsets: IntArray | None = None,
    ) -> None:
        self.trace = trace
        self._up = trace.up(node)
        self._left = _cyclic_run_left(self._up)
        window = min(math.ceil(window_hours / trace.tick_hours), trace.ticks - 1)
        rng = np.random.default_rng(seed)
        drawn = rng.integers(0, trace.ticks - window, size=runs)
        #: each run's start tick: drawn, or given (`offsets`, for a replay from known starts)
        given = None if offsets is None else np.asarray(offsets, dtype=np.int64) % trace.ticks
        self.offsets: IntArray = drawn if given is None else given
        self._boots = boots
        self._rng = rng

    @property
    def tick_hours(self) -> float:
        return self.trace.tick_hours

    def state(self, ids: IntArray, tick: int) -> tuple[BoolArray, FloatArray]:
        at = (self.offsets[ids] + tick) % self.trace.ticks
        return self._up[at], (tick + self._left[at]) * self.trace.tick_hours

    def boot(self, ids: IntArray) -> FloatArray:
        return self._boots.sample(self._rng, (ids.size,))

    def describe(self) -> str:
        return f"replayed in order from {self.offsets.size} start ticks of the {self.trace.describe()}"


class TraceDraws(_Draws):
    """The allocations spot alone gets from a trace replayed in order, as draws for the event engines:
    allocation k of run r is the k-th up-run from its start tick (the first one cut where the run
    starts inside it), its wait the down-run before it; `initial_wait` is the down-run a run starts
    in (the engines start the first allocation at once: it is added to the wall time). Exactly what
    the tick engine's `spot` gives, without stepping through the ticks."""

    def __init__(
        self, availability: TraceAvailability, runs: int, boots: Sampler, seed: np.random.SeedSequence
    ):
        super().__init__(runs, boots, boots, boots, seed)
        up, g = availability._up, availability.trace.tick_hours
        self._boots = boots
        n = up.size
        if not bool(up.any()):
            raise _TooLong("spot is never up in the trace")
        if bool(up.all()):
            self._up_len = np.array([np.inf])
            self._down_len = np.array([0.0])
            self._first = np.zeros(runs, dtype=np.int64)
            self.initial_wait = np.zeros(runs)
            self._cut = np.full(runs, np.inf)
            return
        rot = int(np.flatnonzero(up != np.roll(up, 1))[0])  # a tick where a run begins
        ring = np.roll(up, -rot)
        begins = np.concatenate([[0], np.flatnonzero(ring[1:] != ring[:-1]) + 1])
        lengths = np.diff(np.concatenate([begins, [n]]))
        is_up = ring[begins]
        ups = np.flatnonzero(is_up)  # run indices of the up-runs, in cyclic order
        self._up_len = lengths[ups] * g
        self._down_len = lengths[(ups - 1) % lengths.size] * g  # the down-run before each up-run
        pos = (availability.offsets - rot) % n
        run = np.searchsorted(begins, pos, side="right") - 1
        left = (begins[run] + lengths[run] - pos) * g  # to the end of the run a start falls in
        inside = is_up[run]
        nth = np.cumsum(is_up) - 1  # up-run number of each run (for up-runs)
        self._first = np.where(inside, nth[run], (nth[run] + 1) % ups.size)
        self.initial_wait = np.where(inside, 0.0, left)
        self._cut = np.where(inside, left, np.inf)  # the first allocation's length, if cut

    def _block(self, block: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        ks = block * BLOCK + np.arange(BLOCK)
        index = (self._first[:, None] + ks[None, :]) % self._up_len.size
        life = self._up_len[index]
        if block == 0:
            life[:, 0] = np.minimum(life[:, 0], self._cut)
        wait = self._down_len[index]
        boot = self._boots.sample(self._rng, (self.runs, BLOCK))
        return life, wait, boot


class Draws(Protocol):
    """Allocation k's lifetime, wait and boot for given runs (spoteval.placement.engine._Draws)."""

    def take(self, k: IntArray, rows: IntArray) -> tuple[FloatArray, FloatArray, FloatArray]: ...


class DrawnAvailability:
    """The drawn allocations laid end to end: up L_0 from 0, down W_1, up L_1, ... per run."""

    def __init__(self, draws: Draws, runs: int, tick_hours: float, label: str) -> None:
        self._draws = draws
        self._tick = tick_hours
        self._label = label
        self._k = np.zeros(runs, dtype=np.int64)
        life, _, boot = draws.take(self._k, np.arange(runs))
        self._start = np.zeros(runs)
        self._end = life.copy()
        self._boot = boot.copy()

    @property
    def tick_hours(self) -> float:
        return self._tick

    def state(self, ids: IntArray, tick: int) -> tuple[BoolArray, FloatArray]:
        t = tick * self._tick
        while True:
            over = ids[self._end[ids] <= t]
            if not over.size:
                break
            self._k[over] += 1
            life, wait, boot = self._draws.take(self._k[over], over)
            self._start[over] = self._end[over] + wait
            self._end[over] = self._start[over] + life
            self._boot[over] = boot
        up: BoolArray = self._start[ids] <= t
        return up, self._end[ids].copy()

    def boot(self, ids: IntArray) -> FloatArray:
        return self._boot[ids].copy()

    def describe(self) -> str:
        return f"{self._label}, laid end to end and read every {self._tick * 60:.3g} min"


def tick_for_draws(workload_lengths: tuple[float, ...], boot_hours: float, deadline: float | None) -> float:
    """The tick at which the deadline policies decide on drawn lifetimes: half the shortest of the
    boot and the episode lengths, and no shorter than a 2000th of the deadline."""
    shortest = min([v for v in (*workload_lengths, boot_hours) if v > 0], default=1.0)
    tick = shortest / 2
    if deadline is not None:
        tick = max(tick, deadline / 2000)
    return tick
