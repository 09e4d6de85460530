"""One reading of a run for the next placement: the report and `placement --from-run` give the same
decision from the same record and file; what the record lacks comes from that file (or the stack),
never from the built-in example, each input labelled; with no preemption tau is a lower bound and
is printed as one.

Before: without `--workload` the report and `--from-run` mixed in the built-in example (price cap
2.00, W = 30 min), so a 14-second run showed "wall 1.81 h" and on-demand "not eligible"; and
`tau = 0.0011774 h` was printed as "mean time from start to preemption".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import placement as placement_cli
from scripts import report as report_cli
from spoteval import report
from spoteval.store import Store
from tests.test_report import LAYOUT, RUN, A, att, ev

#: a short run: one node, 14 s of uptime, no preemption, a restart measured by nothing
EVENTS = [
    ev(0, A, "start", "initial", 1.2, concurrency=2, heartbeat_s=30),
    ev(1, A, "ready", None),
    ev(14, A, "stop", "done"),
]
ATTEMPTS = [
    att("e1", 1, "completed", A, 1, 7),
    att("e2", 1, "completed", A, 1, 8),
    att("e3", 1, "completed", A, 7, 13),
]
MANIFEST = b'{"id": "e1"}\n{"id": "e2"}\n{"id": "e3"}\n'
BASE = {"prices": {"on_demand": 3.4}, "restart": {"wait_minutes": 0.1}, "spot_margin": 0.1}


@pytest.fixture
def short_run(tmp_path: Path) -> tuple[str, Path]:
    url = f"file://{tmp_path}/store"
    store = Store(url)
    store.put_new(LAYOUT.manifest, MANIFEST)
    for seq, e in enumerate(EVENTS):
        store.put_new(LAYOUT.event(e.time, e.node, seq), e.dumps())
    for a in ATTEMPTS:
        store.put_new(LAYOUT.attempt(a.episode_id, a.attempt), a.dumps())
        store.put_new(LAYOUT.result(a.episode_id), a.dumps())
    workload = tmp_path / "workload.json"
    workload.write_text(json.dumps(BASE))
    return url, workload


def test_report_and_from_run_decide_alike_from_the_same_record_and_file(
    short_run: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, workload = short_run
    assert report_cli.main(["--store", url, "--run", RUN, "--workload", str(workload), "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)["placement"]
    assert placement_cli.main([str(workload), "--from-run", RUN, "--store", url, "--json"]) == 0
    decided = json.loads(capsys.readouterr().out)
    assert decided["decision"] == reported["decision"] == "spot"
    assert decided["options"] == reported["options"] and decided["inputs"] == reported["inputs"]
    inputs = decided["inputs"]
    assert inputs["prices"] == {"spot": pytest.approx(1.2), "on_demand": 3.4}
    assert inputs["wait_hours"] == pytest.approx(0.1 / 60)  # the file's W, not the example's 30 min
    assert inputs["grant"]["price_cap"] is None  # the example's cap of 2.00 is nowhere
    assert decided["options"]["on_demand"]["eligible"] is True


def test_without_a_file_the_record_alone_decides_or_says_what_is_missing(
    short_run: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = short_run
    # the run measured no restart, so W is missing: no built-in example fills it in
    assert report_cli.main(["--store", url, "--run", RUN]) == 0
    out = capsys.readouterr().out
    assert "Placement for the next run: not decided: the numbers this run measured alone" in out
    assert (
        "not measured in this run and not given: restart.wait_minutes (no restart after a preemption)" in out
    )
    assert "wall 1.81 h" not in out and "2.00" not in out
    assert placement_cli.main(["--from-run", RUN, "--store", url]) == 2
    assert capsys.readouterr().err == (
        f"error: --from-run: run {RUN} did not measure restart.wait_minutes (no restart after a "
        "preemption): give it in a WORKLOAD file or --stack NAME\n"
    )


def test_a_lower_bound_is_printed_as_one_and_each_input_says_where_it_came_from(
    short_run: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, workload = short_run
    assert placement_cli.main([str(workload), "--from-run", RUN, "--store", url]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert lines["lifetime"].startswith(
        "  lifetime     tau >= 4.7 s (a lower bound: no preemption in 14.0 s of uptime"
    )
    assert "mean time from start to preemption" not in lines["lifetime"]
    assert lines["episodes"].endswith(f"[measured in run {RUN}]")
    assert lines["restart"].endswith(f"[restart.wait_minutes from {workload} (not measured)]")
    assert lines["prices"].endswith(f"[spot measured in run {RUN}; the others from {workload}]")
    assert out.startswith(
        f"spot-eval placement: run {RUN}: the numbers it measured, the rest from {workload}\n"
    )
    rep = report.build(Store(url), RUN, report.Base(BASE, "w.json"))
    assert "tau is a lower bound (no preemption in 14.0 s of uptime" in rep.placement_note
    assert "tau >= 4.7 s (the 95% lower bound, not an estimate)" in report.render(rep)


def test_a_bad_key_in_the_reports_workload_file_is_refused_even_when_measured(
    short_run: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = short_run
    bad = tmp_path / "bad.yaml"
    bad.write_text("episode_minutes: 0\nprices: {on_demand: 3.4}\n")
    assert report_cli.main(["--store", url, "--run", RUN, "--workload", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"report: --workload {bad}: workload.episode_minutes: must be > 0, got 0\n"
    )
    assert placement_cli.main([str(bad), "--from-run", RUN, "--store", url]) == 2
    assert capsys.readouterr().err == "error: workload.episode_minutes: must be > 0, got 0\n"
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert report_cli.main(["--store", url, "--run", RUN, "--workload", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"report: {empty}: the workload file is empty (it must be a mapping of keys)\n"
    )
