"""A harness block -> shards (episodes) and the episode command that runs one shard.

A harness pays its start-up (imports, task and dataset load, client set-up) once per process: 5.5 s
for one inspect sample on an idle machine. One sample per episode would make the run's D, tau and
placement describe start-up rather than model work, and one episode for the whole task would make
a preemption cost everything. A shard is the middle: `episode_size` samples in one episode, chosen
as the smallest size whose start-up is at most `overhead` (10 %) of the episode:

    size = ceil(startup_s * (1 - overhead) / (overhead * sample_s))

then capped so that an episode holds at most `max_episode_s` of model work and the shards are at
least `parallel` (the episodes run at once), and at most the number of samples. A preemption then
loses one start-up and the sample in flight: finished samples are in the store (progress.py).
`startup_s` and `sample_s` come from the harness benchmark or a run record (spoteval/harness/
timing.py); both, or the size itself, can be given instead, and the plan states which it used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.harness.ids import SampleId, sample_keys
from spoteval.harness.timing import Timing, benchmark_timing
from spoteval.manifest import ManifestEntry

#: Start-up per shard and time per sample (seconds) of each harness, as the harness benchmark
#: measured them (spoteval/harness/measured.json; rerun `python -m benchmarks.harness_bench --write`).
#: A real model's time per sample is longer: give `sample_s` from a trial run, or plan from a run
#: record (spoteval/harness/timing.py).
MEASURED: Final[Mapping[str, Timing]] = {h: benchmark_timing(h) for h in ("inspect", "lm-eval")}
DEFAULT_OVERHEAD: Final = 0.1
DEFAULT_MAX_EPISODE_S: Final = 1800.0


def choose_episode_size(
    timing: Timing,
    n_samples: int,
    *,
    parallel: int = 1,
    overhead: float = DEFAULT_OVERHEAD,
    max_episode_s: float = DEFAULT_MAX_EPISODE_S,
) -> int:
    """Samples per episode (see the module's docstring)."""
    if n_samples < 1:
        raise ValueError("there are no samples to shard")
    if not 0 < overhead < 1 or timing.sample_s <= 0 or timing.startup_s < 0 or parallel < 1:
        raise ValueError("need 0 < overhead < 1, sample_s > 0, startup_s >= 0, parallel >= 1")
    size = math.ceil(timing.startup_s * (1 - overhead) / (overhead * timing.sample_s))
    size = min(size, max(1, math.floor(max_episode_s / timing.sample_s)))
    size = min(size, math.ceil(n_samples / parallel))
    return max(1, min(size, n_samples))


@dataclass(frozen=True)
class HarnessBlock:
    """What the user names: the harness, the task, its arguments and the harness's options."""

    harness: str
    task: str
    model: str
    args: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    samples: Sequence[SampleId] | None = None  # None: every sample of the task
    episode_size: int | None = None  # None: chosen from the timing
    sample_s: float | None = None  # time per sample, when known better than the timing's
    startup_s: float | None = None  # start-up per shard, when known better than the timing's


def _slug(task: str) -> str:
    name = re.split(r"[@/:]", task.rstrip("/"))[-1].removesuffix(".py") or "task"
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name).strip("_-") or "task"
    return cleaned[:64] if cleaned[0].isalnum() else f"t{cleaned[:63]}"


def shard(block: HarnessBlock, samples: Sequence[SampleId], size: int) -> list[ManifestEntry]:
    """Manifest entries, one per shard: id `{task}-{n:04d}`, params naming the harness and samples."""
    sample_keys(samples)  # refuses ids that are not keys, or two that would meet
    if size < 1:
        raise ValueError(f"episode size {size} must be >= 1")
    slug = _slug(block.task)
    count = math.ceil(len(samples) / size)
    width = max(4, len(str(count)))
    return [
        ManifestEntry(
            f"{slug}-{n + 1:0{width}d}",
            {
                "harness": block.harness,
                "task": block.task,
                "samples": list(samples[n * size : (n + 1) * size]),
            },
        )
        for n in range(count)
    ]


def episode_command(block: HarnessBlock, python: str = "{python}") -> list[str]:
    """The episode command (the agent fills `{python}`, `{model_url}`, `{output}`, `{episode_id}`)."""
    argv = [python, "-m", "spoteval.harness", "run", "--harness", block.harness, "--task", block.task]
    argv += ["--model", block.model, "--model-url", "{model_url}", "--output", "{output}"]
    argv += ["--episode", "{episode_id}"]
    if block.args:
        argv += ["--args", json.dumps(dict(block.args), sort_keys=True)]
    if block.options:
        argv += ["--options", json.dumps(dict(block.options), sort_keys=True)]
    return argv


@dataclass(frozen=True)
class ShardPlan:
    entries: list[ManifestEntry]
    size: int
    timing: Timing
    chosen: bool  # False when the user gave the size

    def describe(self) -> str:
        """One line stating the size and where it came from (for the drill and the report)."""
        n = sum(len(e.params["samples"]) for e in self.entries)
        source = (
            f"chosen from start-up {self.timing.startup_s:g} s per shard and {self.timing.sample_s:g} s "
            f"per sample (start-up <= {DEFAULT_OVERHEAD:.0%} of a shard"
            + (f"; figures: {self.timing.source})" if self.timing.source else ")")
            if self.chosen
            else "as given (shard_size)"
        )
        return f"{n} samples in {len(self.entries)} shards of up to {self.size}, {source}"


def plan(
    block: HarnessBlock, samples: Sequence[SampleId], *, parallel: int = 1, timing: Timing | None = None
) -> ShardPlan:
    """Shards of the block's samples: the given `episode_size`, or one chosen from the timing (the
    harness benchmark's unless a run record's is given), with the block's own figures over it."""
    base = timing or MEASURED.get(block.harness) or benchmark_timing(block.harness)
    timing = base.given(block.startup_s, block.sample_s)
    if block.episode_size is not None:
        size, chosen = block.episode_size, False
    else:
        size, chosen = choose_episode_size(timing, len(samples), parallel=parallel), True
    return ShardPlan(shard(block, samples, size), size, timing, chosen)
