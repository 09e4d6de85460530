"""Per-task scores from a run's results (spoteval/scores.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from spoteval.scores import as_json, as_text, bootstrap_interval, task_label, task_scores

TASK = "/home/someone/evals/tiny.py@spoteval_tiny"


def _shard(episode: str, values: list[Any], *, epochs: int = 1, node: str = "node-7") -> dict[str, Any]:
    samples = [
        {"id": f"s/{i}", "key": f"s=2F{i}", "epoch": e, "scores": {"exact": v, "grade": "C" if v else "I"}}
        for i, v in enumerate(values)
        for e in range(1, epochs + 1)
    ]
    output = {"harness": "inspect", "task": TASK, "model": "standin", "samples": samples}
    return {"episode_id": episode, "outcome": "completed", "node": node, "output": output}


def test_mean_and_bootstrap_interval_are_exact_for_a_fixed_seed() -> None:
    assert bootstrap_interval([1.0] * 6 + [0.0] * 4) == (0.3, 0.9)
    assert bootstrap_interval([0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="no values"):
        bootstrap_interval([])


def test_scores_per_task_with_failures_shown_apart() -> None:
    results = [
        _shard("tiny-0001", [1.0, 1.0, 0.0, 1.0, 0.0]),
        _shard("tiny-0002", [True, False, True, 1, 0.0]),
        {"episode_id": "tiny-0003", "outcome": "harness_error", "error": "bad argument"},
        {"episode_id": "tiny-0004", "outcome": "model_failure", "error": "500"},
        {"episode_id": "plain-1", "outcome": "completed", "output": {"answer": 3}},  # not a harness shard
    ]
    params = {
        "tiny-0003": {"harness": "inspect", "task": TASK, "samples": ["a", "b", "c"]},
        "tiny-0004": {"harness": "inspect", "task": TASK, "samples": ["d"]},
    }
    (scores,) = task_scores(results, params)
    assert (scores.harness, scores.task, scores.model) == ("inspect", "tiny.py@spoteval_tiny", "standin")
    assert (scores.samples, scores.shards, scores.model_failures, scores.harness_errors) == (10, 2, 1, 3)
    (exact,) = scores.numeric
    assert (exact.name, exact.n, exact.mean) == ("exact", 10, 0.6)
    assert (exact.low, exact.high) == bootstrap_interval([1, 1, 0, 1, 0, 1, 0, 1, 1, 0])
    (grade,) = scores.categorical
    assert (grade.name, grade.n, dict(grade.counts)) == ("grade", 10, {"C": 6, "I": 4})
    assert as_text([scores]).splitlines() == [
        "Scores (completed shards; a harness error is not the model's and is never scored)",
        "  inspect tiny.py@spoteval_tiny, model standin: 10 samples in 2 shards",
        f"    exact                mean 0.600  95% CI [{exact.low:.3f}, {exact.high:.3f}]  n=10",
        "    grade                C 6  I 4  n=10",
        "    not scored: 1 samples in model failures, 3 in harness errors",
    ]


def test_epochs_are_averaged_per_sample_before_the_interval() -> None:
    result = _shard("tiny-0001", [1.0, 0.0], epochs=3)
    result["output"]["samples"][0]["scores"]["exact"] = 0.0  # sample 0: epochs 0, 1, 1
    (scores,) = task_scores([result])
    (exact,) = scores.numeric
    assert (exact.n, round(exact.mean, 6)) == (2, round((2 / 3 + 0.0) / 2, 6))
    assert scores.categorical[0].n == 6


def test_the_json_is_safe_to_share() -> None:
    text = json.dumps(as_json(task_scores([_shard("tiny-0001", [1.0, 0.0])])))
    for private in ("tiny-0001", "node-7", "s/0", "s=2F0", "/home/someone"):
        assert private not in text
    assert task_label("a/b/c.py@t") == "c.py@t" and task_label("gsm8k") == "gsm8k"


def test_the_run_report_has_a_scores_section_and_harness_errors_apart() -> None:
    from spoteval.manifest import ManifestEntry, dump_manifest
    from spoteval.record import Attempt
    from spoteval.report import analyse, parse_record, render, report_json

    t0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    done = _shard("tiny-0001", [1.0, 0.0, 1.0, 1.0])
    results = [
        Attempt("tiny-0001", "completed", 1, "node-7", t0, t0 + timedelta(seconds=30), output=done["output"]),
        Attempt("tiny-0002", "harness_error", 1, "node-7", t0, t0 + timedelta(seconds=3), error="exit 3"),
    ]
    manifest = dump_manifest(
        [
            ManifestEntry(
                "tiny-0001", {"harness": "inspect", "task": TASK, "samples": ["s/0", "s/1", "s/2", "s/3"]}
            ),
            ManifestEntry("tiny-0002", {"harness": "inspect", "task": TASK, "samples": ["s/4", "s/5"]}),
        ]
    )
    objects = {f"runs/r1/results/{r.episode_id}.json": r.dumps(as_result=True) for r in results}
    rep = analyse(parse_record("r1", objects, manifest=manifest), now=t0 + timedelta(hours=1))
    text = render(rep, shared=True, width=140)
    assert "Harness errors: 1 of 2 episodes failed for reasons that are not the model's" in text
    assert "  inspect tiny.py@spoteval_tiny, model standin: 4 samples in 1 shards" in text
    assert "    not scored: 0 samples in model failures, 2 in harness errors" in text
    shared = report_json(rep, shared=True)
    assert shared["scores"][0]["numeric"][0]["mean"] == 0.75
    assert shared["scores"][0]["unscored"] == {"model_failure": 0, "harness_error": 2}
    assert "tiny-0001" not in json.dumps(shared["scores"])


def test_a_harness_run_gives_the_placement_d_per_sample_with_start_up_once_per_shard() -> None:
    from spoteval.manifest import ManifestEntry, dump_manifest
    from spoteval.record import Attempt
    from spoteval.report import analyse, parse_record, workload_from_run

    t0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    output = _shard("tiny-0001", [1.0, 0.0, 1.0, 1.0])["output"]
    output["startup_s"] = 4.0
    for n, sample in enumerate(output["samples"]):
        sample["model_s"] = 0.5 * (n + 1)
    done = Attempt("tiny-0001", "completed", 1, "node-7", t0, t0 + timedelta(seconds=30), output=output)
    manifest = dump_manifest(
        [
            ManifestEntry("tiny-0001", {"harness": "inspect", "task": TASK, "samples": ["a", "b", "c", "d"]}),
            ManifestEntry("tiny-0002", {"harness": "inspect", "task": TASK, "samples": ["e", "f"]}),
        ]
    )
    record = parse_record(
        "r1", {"runs/r1/results/tiny-0001.json": done.dumps(as_result=True)}, manifest=manifest
    )
    workload = workload_from_run(analyse(record, now=t0 + timedelta(hours=1)))
    assert workload["episodes"] == 6  # samples, not shards
    # each sample's model time plus a quarter of its shard's 4 s start-up, in minutes
    assert workload["episode_minutes_samples"] == [round((0.5 * n + 1.0) / 60, 6) for n in (1, 2, 3, 4)]
