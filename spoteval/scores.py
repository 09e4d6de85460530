"""Per-task scores of a run, from its results: pure functions and two renderers (text, JSON).

Input: the run's results (`results/{episode_id}.json` objects) and, for the episodes that did not
complete, their manifest parameters (the harness and task of a shard, its samples). A completed
harness shard's `output` lists its samples (spoteval/harness/runner.py): `{"id", "key", "epoch",
"scores": {name: value}, ...}`.

- A numeric score (numbers and booleans, per sample the mean over its epochs) gets its mean and a
  percentile-bootstrap 95 % interval over samples (`RESAMPLES` resamples, a fixed seed, so the
  same results give the same interval).
- A categorical score (strings) gets the count of each value, over every sample and epoch.
- Samples of shards that ended as `model_failure` are counted as unscored model failures; those of
  `harness_error` shards apart, as the harness's: never in the model's scores.

Safe for the shared report: tasks are named by harness and task (a path is cut to its last part);
no episode or sample ids, nodes, addresses or prices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

RESAMPLES: Final = 2000
SEED: Final = 20261201
_CHUNK: Final = 250


@dataclass(frozen=True)
class Numeric:
    name: str
    n: int
    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class Categorical:
    name: str
    n: int
    counts: Mapping[str, int]


@dataclass(frozen=True)
class TaskScores:
    harness: str
    task: str
    model: str | None
    samples: int  # scored samples (completed shards)
    shards: int  # completed shards
    model_failures: int = 0  # samples in shards that ended as model_failure
    harness_errors: int = 0  # samples in shards that ended as harness_error
    numeric: tuple[Numeric, ...] = ()
    categorical: tuple[Categorical, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)


def task_label(task: str) -> str:
    """A task named without the folders it was read from (`a/b/tiny.py@t` -> `tiny.py@t`)."""
    head, sep, name = task.partition("@")
    return head.replace("\\", "/").rsplit("/", 1)[-1] + sep + name


def bootstrap_interval(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """Percentile-bootstrap 95 % interval of the mean."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no values")
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    means: list[np.ndarray[Any, Any]] = []
    left = resamples
    while left > 0:
        k = min(_CHUNK, left)
        means.append(data[rng.integers(0, data.size, size=(k, data.size))].mean(axis=1))
        left -= k
    low, high = np.percentile(np.concatenate(means), [2.5, 97.5])
    return float(low), float(high)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return None


@dataclass
class _Acc:
    harness: str
    task: str
    model: str | None = None
    shards: int = 0
    model_failures: int = 0
    harness_errors: int = 0
    per_sample: dict[str, dict[tuple[str, str], list[object]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def task_scores(
    results: Iterable[Mapping[str, Any]], params: Mapping[str, Mapping[str, Any]] | None = None
) -> list[TaskScores]:
    """Scores per (harness, task), sorted by harness and task."""
    params = params or {}
    accs: dict[tuple[str, str], _Acc] = {}
    for result in results:
        episode = str(result.get("episode_id", ""))
        outcome = result.get("outcome")
        output = result.get("output")
        meta = params.get(episode, {})
        if outcome == "completed" and isinstance(output, Mapping) and "harness" in output:
            harness, task = str(output["harness"]), str(output.get("task", ""))
        elif outcome in ("model_failure", "harness_error") and "harness" in meta:
            harness, task = str(meta["harness"]), str(meta.get("task", ""))
        else:
            continue  # not a harness shard
        acc = accs.setdefault((harness, task_label(task)), _Acc(harness, task_label(task)))
        if outcome != "completed":
            n = len(meta.get("samples") or [])
            if outcome == "model_failure":
                acc.model_failures += n
            else:
                acc.harness_errors += n
            continue
        assert isinstance(output, Mapping)
        acc.shards += 1
        acc.model = acc.model or (str(output["model"]) if output.get("model") else None)
        for sample in output.get("samples") or []:
            if not isinstance(sample, Mapping) or not isinstance(sample.get("scores"), Mapping):
                acc.problems.append("a sample without scores")
                continue
            who = (episode, str(sample.get("key", sample.get("id"))))
            for name, value in sample["scores"].items():
                acc.per_sample.setdefault(str(name), {}).setdefault(who, []).append(value)
    return [_finish(accs[k]) for k in sorted(accs)]


def _finish(acc: _Acc) -> TaskScores:
    numeric: list[Numeric] = []
    categorical: list[Categorical] = []
    samples = 0
    for name in sorted(acc.per_sample):
        by_sample = acc.per_sample[name]
        samples = max(samples, len(by_sample))
        numbers = [[_number(v) for v in values] for values in by_sample.values()]
        if all(x is not None for xs in numbers for x in xs):
            means = [sum(x for x in xs if x is not None) / len(xs) for xs in numbers]
            low, high = bootstrap_interval(means)
            numeric.append(Numeric(name, len(means), sum(means) / len(means), low, high))
        else:
            counts: dict[str, int] = {}
            for values in by_sample.values():
                for v in values:
                    counts[str(v)] = counts.get(str(v), 0) + 1
            categorical.append(Categorical(name, sum(counts.values()), dict(sorted(counts.items()))))
    return TaskScores(
        acc.harness,
        acc.task,
        acc.model,
        samples,
        acc.shards,
        acc.model_failures,
        acc.harness_errors,
        tuple(numeric),
        tuple(categorical),
        tuple(sorted(set(acc.problems))),
    )


def as_json(scores: Sequence[TaskScores]) -> list[dict[str, Any]]:
    return [
        {
            "harness": s.harness,
            "task": s.task,
            "model": s.model,
            "samples": s.samples,
            "shards": s.shards,
            "unscored": {"model_failure": s.model_failures, "harness_error": s.harness_errors},
            "numeric": [
                {
                    "name": m.name,
                    "n": m.n,
                    "mean": round(m.mean, 6),
                    "ci95": [round(m.low, 6), round(m.high, 6)],
                }
                for m in s.numeric
            ],
            "categorical": [{"name": c.name, "n": c.n, "counts": dict(c.counts)} for c in s.categorical],
            "problems": list(s.problems),
        }
        for s in scores
    ]


def as_text(scores: Sequence[TaskScores]) -> str:
    if not scores:
        return "Scores: no harness shards in this run.\n"
    lines = ["Scores (completed shards; a harness error is not the model's and is never scored)"]
    for s in scores:
        model = f", model {s.model}" if s.model else ""
        lines.append(f"  {s.harness} {s.task}{model}: {s.samples} samples in {s.shards} shards")
        for m in s.numeric:
            lines.append(f"    {m.name:<20} mean {m.mean:.3f}  95% CI [{m.low:.3f}, {m.high:.3f}]  n={m.n}")
        for c in s.categorical:
            counts = "  ".join(f"{k} {v}" for k, v in c.counts.items())
            lines.append(f"    {c.name:<20} {counts}  n={c.n}")
        if s.model_failures or s.harness_errors:
            lines.append(
                f"    not scored: {s.model_failures} samples in model failures, "
                f"{s.harness_errors} in harness errors"
            )
        for p in s.problems:
            lines.append(f"    problem: {p}")
    return "\n".join(lines) + "\n"
