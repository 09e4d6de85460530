"""Pool figures from a record: shares per node and the work done twice."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spoteval.record import Attempt
from spoteval.report.pool import pool_figures, to_json
from spoteval.report.pool import render as render_pool

T = datetime(2026, 12, 1, tzinfo=timezone.utc)


def attempt(
    episode: str, node: str, outcome: str, start: float, seconds: float, n: int = 1, *, lost: bool = False
) -> Attempt:
    begin = T + timedelta(seconds=start)
    output: dict[str, object] | None = {} if outcome == "completed" else None
    details = {"lost": True} if lost else {}
    end = begin + timedelta(seconds=seconds)
    return Attempt(episode, outcome, n, node, begin, end, output=output, details=details)


def test_duplicated_work_is_time_on_episodes_another_node_finished() -> None:
    attempts = [
        attempt("e1", "a", "completed", 0, 10),
        attempt("e2", "b", "interrupted", 0, 4, lost=True),  # in flight when b was lost; a finished e2
        attempt("e5", "b", "interrupted", 0, 2),  # b's notice interrupted it; a finished e5
        attempt("e5", "a", "completed", 40, 3, n=2),
        attempt("e2", "a", "completed", 10, 6, n=2),
        attempt("e3", "b", "completed", 0, 5),  # b's attempt durable, result not: a ran it again
        attempt("e3", "a", "completed", 16, 5, n=2),
        attempt("e4", "a", "interrupted", 21, 1),  # a's own preemption, a finished it: not duplicated
        attempt("e4", "a", "completed", 30, 4, n=2),
    ]
    episodes = ("e1", "e2", "e3", "e4", "e5")
    results = {e: next(a for a in reversed(attempts) if a.episode_id == e) for e in episodes}
    figures = pool_figures(attempts, results)
    assert figures.episode_s == 40.0
    assert figures.duplicated_s == 11.0
    assert round(figures.duplicated_share, 6) == round(11 / 40, 6)
    assert figures.interrupted_s == 6.0  # in flight when taken: no design saves it, shown apart
    assert round(figures.beyond_interrupted_share, 6) == round(5 / 40, 6)  # e3: finished twice
    assert figures.beyond_one == 1
    assert figures.nodes["a"].results == 5 and figures.nodes["b"].results == 0
    assert (figures.nodes["b"].attempts, figures.nodes["b"].duplicated_s) == (3, 11.0)


def test_no_attempts_no_figures() -> None:
    figures = pool_figures([], {})
    assert (figures.episode_s, figures.duplicated_share, figures.nodes) == (0.0, 0.0, {})


def test_pool_figures_render_one_line_per_node_and_the_duplicated_work() -> None:
    attempts = [attempt("e1", "a", "completed", 0, 10), attempt("e1", "b", "completed", 0, 5, n=2)]
    figures = pool_figures(attempts, {"e1": attempts[0]})
    lines = render_pool(figures, {"a": "node-1", "b": "node-2"})
    assert lines[1].split() == ["node-1", "1", "1", "10.0s", "0.0s"]
    assert lines[2].split() == ["node-2", "0", "1", "5.0s", "5.0s"]
    assert lines[3] == (
        "duplicated work: 5.0 s of 15.0 s episode time (33.33 %; of it interrupted, in flight when "
        "taken: 0.0 s); "
        "completed attempts beyond one per episode: 1"
    )
    doc = to_json(figures)
    assert doc["duplicated_share"] == 0.333333 and doc["completed_beyond_one"] == 1
    assert doc["interrupted_s"] == 0.0


def test_a_report_of_two_nodes_shows_the_pool_and_a_shared_one_names_no_node() -> None:
    from spoteval.report import analyse, render, report_json
    from spoteval.report.load import RunRecord

    attempts = (attempt("e1", "i-aaa", "completed", 0, 10), attempt("e1", "i-bbb", "completed", 0, 5, n=2))
    record = RunRecord("r1", "file:///tmp/x", None, (), attempts, {"e1": attempts[0]}, ())
    report = analyse(record, now=T)
    text = render(report)
    assert "Pool: each node's share" in text and "i-bbb" in text
    assert "duplicated work: 5.0 s of 15.0 s episode time (33.33 %; of it interrupted" in text
    shared = render(report, shared=True)
    assert "i-aaa" not in shared and "i-bbb" not in shared and "duplicated work: 5.0 s" in shared
    doc = report_json(report, shared=True)
    assert sorted(doc["pool"]["nodes"]) == ["node-1", "node-2"]
    assert report_json(report)["pool"]["nodes"]["i-bbb"]["duplicated_s"] == 5.0


def test_a_single_node_report_has_no_pool() -> None:
    from spoteval.report import analyse, report_json
    from spoteval.report.load import RunRecord

    attempts = (attempt("e1", "i-aaa", "completed", 0, 10),)
    report = analyse(RunRecord("r1", "file:///tmp/x", None, (), attempts, {"e1": attempts[0]}, ()), now=T)
    assert report.pool is None and report_json(report)["pool"] is None
