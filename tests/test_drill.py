"""The local drill: the real agent under a chaos controller, then the report of its record.

One shorter drill runs once for the module (about 60 s on 2 cores); each test checks one property
of its record against what the controller did.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import drill as drill_cli
from spoteval import drill, report, sample_episode
from spoteval.agent.episodes import SETTLE_S
from spoteval.record import Attempt, RunLayout, parse_time
from spoteval.store import Store

# also run beside two busy processes (.ci/loaded-pass); the module's drill runs in its first test
pytestmark = [pytest.mark.timing, pytest.mark.timeout(900)]

# Seed 18 draws lifetimes of 2.4, 7.6, 6.9, 10.2, 6.9, 30.3, 7.4, 18.9, ... s: about five preemptions
# before the run can finish (more on a loaded machine, where episodes run slower). For this seed the
# 95% interval of tau covers the injected mean whether 4 or 14 nodes are taken before the end. The
# run is long enough (about 55 billed seconds) that what the closed form leaves out, the first boot
# and the last partial round (with its retries), stays a few percent of the billed time.
SEED = 18
LIFETIME_S = 10.0
SETTINGS = drill.DrillConfig(
    out=Path("unused"),
    episodes=320,
    concurrency=8,
    lifetime_s=LIFETIME_S,
    notice_s=1.0,
    capacity_delay_s=0.5,
    seed=SEED,
    episode_seconds=(0.3, 1.2),
    fail_rate=0.05,
    max_attempts=2,
    heartbeat_s=2.0,
    server_startup_s=0.2,
    timeout_s=600.0,  # stops a drill that hangs; how long one takes depends on the machine's load
)


@dataclass(frozen=True)
class Drilled:
    result: drill.DrillResult
    report: report.RunReport
    attempts: tuple[Attempt, ...]
    results: dict[str, Attempt]
    manifest: list[str]


@pytest.fixture(scope="module")
def drilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drilled]:
    out = tmp_path_factory.mktemp("drill")
    cfg = drill.DrillConfig(**{**SETTINGS.__dict__, "out": out})
    result = drill.run_drill(cfg)
    store = Store(result.store_url, result.store_options)
    record = report.load_run(store, result.run_id)
    rep = report.analyse(record)
    manifest = [e.id for e in record.manifest or ()]
    yield Drilled(result, rep, record.attempts, dict(record.results), manifest)


def test_the_drill_finishes_with_preemptions_and_restarts(drilled: Drilled) -> None:
    r = drilled.result
    assert r.finished, r.notes
    assert len(r.kills) >= 3 and r.incarnations == len(r.kills) + 1, r.kills
    assert all(k.observed for k in r.kills), r.kills
    assert drilled.report.problems == (), drilled.report.problems
    # the record shows every start, notice and preemption, with reasons and prices
    events = drilled.report.record.events
    starts = [e for e in events if e.kind == "start"]
    agent_starts = [e for e in starts if "incarnation" in e.details]
    assert agent_starts[0].reason == "initial"
    assert {e.reason for e in agent_starts[1:]} == {"restart_after_preemption"}
    assert all(e.price_per_hour == drill.SPOT_PRICE and e.price_source == "configured" for e in starts)
    assert sum(1 for e in events if e.kind == "preempted") == len(r.kills)
    assert [e.reason for e in events if e.kind == "stop"] == ["done"]


def test_the_drills_restarts_are_the_operators(drilled: Drilled) -> None:
    r = drilled.result
    events = drilled.report.record.events
    by_operator = [
        e
        for e in events
        if e.kind == "start"
        and e.reason == "restart_after_preemption"
        and e.details.get("source") == "operator"
    ]
    by_agent = [e for e in events if e.kind == "start" and "incarnation" in e.details]
    # every node start after the first is the operator's; the only other starts are the agents' own
    assert len(by_operator) == r.incarnations - 1 == len(r.kills)
    assert len(by_operator) + len(by_agent) == sum(1 for e in events if e.kind == "start")


def test_every_episode_has_exactly_one_result(drilled: Drilled) -> None:
    assert sorted(drilled.results) == sorted(drilled.manifest)
    assert len(drilled.manifest) == SETTINGS.episodes
    layout = RunLayout(drilled.result.run_id)
    store = Store(drilled.result.store_url)
    assert len(store.list(layout.results_prefix)) == SETTINGS.episodes


def test_completed_work_is_never_lost(drilled: Drilled) -> None:
    by_episode: dict[str, list[Attempt]] = defaultdict(list)
    for a in drilled.attempts:
        by_episode[a.episode_id].append(a)
    for episode, attempts in by_episode.items():
        completed = [a for a in attempts if a.outcome == "completed"]
        assert len(completed) <= 1, f"{episode} ran again after it completed"
        if completed:
            assert completed[0].attempt == max(a.attempt for a in attempts)
            assert drilled.results[episode].outcome == "completed"
            assert drilled.results[episode].output == completed[0].output


def test_interrupted_attempts_are_the_episodes_in_flight_at_each_kill(drilled: Drilled) -> None:
    matched: set[tuple[str, int]] = set()
    for kill in drilled.result.kills:
        if kill.notice_at is None:
            continue
        running = [
            a
            for a in drilled.attempts
            if kill.launched <= a.started <= kill.notice_at <= a.ended and a.started < kill.killed_at
        ]
        in_flight = set(kill.in_flight)
        # started (stamped just before its process is made) before the freeze, but its process ran
        # only after the notice: the controller's snapshot could not show it; killed by the agent's
        # shutdown a moment later
        launching = {
            a.episode_id
            for a in running
            if a.outcome == "interrupted"
            and a.episode_id not in in_flight
            and "spawned" in a.details
            and parse_time(a.details["spawned"]) >= kill.notice_at
        }
        interrupted = {a.episode_id for a in running if a.outcome == "interrupted"} - launching
        finished_in_window = {a.episode_id for a in running if a.outcome != "interrupted"}
        # every episode the controller saw running is recorded, interrupted or finished in the window
        assert interrupted <= in_flight
        assert in_flight <= interrupted | finished_in_window
        assert not interrupted & finished_in_window
        assert len(interrupted) == len(in_flight - finished_in_window)
        # an episode that had already exited when the node was frozen is stamped `ended` by the
        # agent once the node runs again, a moment after the notice: finished, never interrupted
        for a in running:
            if a.episode_id not in in_flight and a.episode_id not in launching:
                assert a.outcome != "interrupted"
                assert kill.notice_at <= a.ended <= kill.killed_at, a
        matched |= {(a.episode_id, a.attempt) for a in running if a.outcome == "interrupted"}
    assert matched
    # Any other interrupted attempt is one of two documented agent behaviours: its settle rule turned
    # a failure that exited non-zero at most SETTLE_S before a notice into an interruption (see
    # spoteval/agent/episodes.py), or it was dispatched in the moment before the agent acted on the
    # SIGTERM, and killed at once.
    notices = [k.notice_at for k in drilled.result.kills if k.notice_at is not None]
    for a in drilled.attempts:
        if a.outcome == "interrupted" and (a.episode_id, a.attempt) not in matched:
            settled = a.details.get("returncode") not in (0, None) and any(
                0 <= (n - a.ended).total_seconds() <= SETTLE_S + 0.2 for n in notices
            )
            late = any(
                k.notice_at is not None and k.notice_at <= a.started <= a.ended <= k.killed_at
                for k in drilled.result.kills
            )
            assert settled or late, a


def test_no_interrupted_attempt_counts_as_a_model_failure(drilled: Drilled) -> None:
    failing = {e for e in drilled.manifest if sample_episode.will_fail(e, SETTINGS.fail_rate, SEED)}
    assert failing, "the drill's sample should have some model failures"
    failures = Counter(a.episode_id for a in drilled.attempts if a.outcome == "model_failure")
    # only the episodes the sample fails on purpose fail, each exactly max_attempts times, however
    # often the node was taken away while they ran
    assert set(failures) == failing
    assert all(n == SETTINGS.max_attempts for n in failures.values())
    final = {e for e, r in drilled.results.items() if r.outcome == "model_failure"}
    assert final == failing
    assert drilled.report.episodes.model_failures == len(failing)
    assert drilled.report.episodes.completed == SETTINGS.episodes - len(failing)


def test_the_tau_interval_covers_the_injected_mean(drilled: Drilled) -> None:
    tau = drilled.report.tau
    assert tau is not None and tau.seconds is not None and tau.high_s is not None
    assert tau.preemptions == len(drilled.result.kills)
    assert tau.low_s <= LIFETIME_S <= tau.high_s
    # each preempted allocation runs from the agent's start event (or, for a node taken while it
    # booted, the launch) to the kill; the kill comes the injected lifetime after the launch, never
    # before (how much later depends on how loaded the machine is, so only the order is asserted)
    taken = [a for a in drilled.report.allocations if not a.censored]
    assert len(taken) == len(drilled.result.kills)
    for alloc, kill in zip(taken, drilled.result.kills, strict=True):
        assert alloc.end == kill.killed_at
        assert (kill.killed_at - kill.launched).total_seconds() >= kill.lifetime_s - 0.001
        assert kill.launched <= alloc.start <= kill.killed_at


def _left_out_by_the_closed_form_s(drilled: Drilled) -> float:
    """The billed seconds the closed form leaves out by design (spoteval/placement/model.py): the
    first boot (every allocation before the run's first episode, and the boot of the one that ran it)
    and the last partial round (from the last episode's dispatch to the stop). Both grow with the
    machine's load, so the comparison adds what the record measured for them."""
    run = sorted((a for a in drilled.report.allocations if a.kind == "run"), key=lambda a: a.start)
    first = min(a.started for a in drilled.attempts)
    last = max(a.started for a in drilled.attempts)
    before = sum(a.seconds for a in run if a.end <= first)
    serving = next(a for a in run if a.start <= first < a.end)
    final = run[-1]
    assert final.ended_by == "stop" and final.start <= last <= final.end
    return before + (first - serving.start).total_seconds() + (final.end - last).total_seconds()


def _between_episodes_s(drilled: Drilled) -> float:
    """The billed seconds the closed form leaves out because it runs episodes back to back: while a
    node serves, a slot waits between one attempt's end and the next one's start (the agent records
    the attempt, makes the next dispatch's journal durable and spawns its process). Per allocation,
    from its first attempt to its notice (the last allocation: to the last dispatch, where the last
    round begins), the slot time no attempt covers, over C. It grows with the machine's load."""
    c = SETTINGS.concurrency
    run = sorted((a for a in drilled.report.allocations if a.kind == "run"), key=lambda a: a.start)
    last = max(a.started for a in drilled.attempts)
    idle = 0.0
    for alloc in run:
        inside = [a for a in drilled.attempts if alloc.start <= a.started < alloc.end]
        if not inside:
            continue
        begin = min(a.started for a in inside)
        end = last if alloc is run[-1] else (alloc.notice or alloc.end)
        busy = sum(max(0.0, (min(a.ended, end) - max(a.started, begin)).total_seconds()) for a in inside)
        idle += max(0.0, c * (end - begin).total_seconds() - busy) / c
    return idle


def test_measured_efficiency_is_within_ten_percent_of_the_closed_form(drilled: Drilled) -> None:
    eff = drilled.report.efficiency
    assert eff.measured is not None and eff.predicted is not None
    # the closed form for the drill's own measured numbers: D_i of every finished attempt, tau from
    # the record, B = S_boot + the billed notice tail per preemption, C = the agent's concurrency
    assert eff.concurrency == SETTINGS.concurrency
    tau = drilled.report.tau
    assert tau is not None and eff.tau_s == tau.seconds and eff.tau_s is not None
    durations = drilled.report.episodes.durations_s
    boot = (eff.boot_s or 0.0) + eff.notice_tail_s
    assert eff.predicted == report.predicted_efficiency(
        durations, eff.concurrency, eff.tau_s, boot, eff.wait_s or 0.0
    )
    assert eff.measured == pytest.approx(eff.useful_node_hours / eff.billed_node_hours, rel=1e-12)
    # the closed form's billed hours, plus what it leaves out: the first boot, the last partial round,
    # and the agent's own time between one episode and the next
    left_out = _left_out_by_the_closed_form_s(drilled) + _between_episodes_s(drilled)
    predicted_billed_s = eff.useful_node_hours * 3600.0 / eff.predicted + left_out
    predicted = eff.useful_node_hours * 3600.0 / predicted_billed_s
    assert abs(eff.measured - predicted) / predicted <= 0.10, (eff.measured, predicted, eff.predicted)
    assert 0.4 < eff.measured < 1.0


def test_the_drill_writes_its_log_and_the_report_plots_it(drilled: Drilled, tmp_path: Path) -> None:
    log = json.loads((drilled.result.config.out / "drill.json").read_text())
    assert log["finished"] and len(log["kills"]) == len(drilled.result.kills)
    png = tmp_path / "timeline.png"
    report.plot_timeline(drilled.report, str(png))
    assert png.stat().st_size > 10_000
    text = report.render(drilled.report)
    assert "preempted (provider)" in text and "restart_after_preemption" in text


def test_the_drill_command_on_s3_prints_the_report_and_the_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --out, as a user gives it
    code = drill_cli.main(
        [
            "--store",
            "s3",
            "--episodes",
            "12",
            "--concurrency",
            "6",
            "--lifetime-s",
            "1000",
            "--seed",
            "1",
            "--out",
            "out",
            "--timeout-s",
            "600",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "12/12 episodes have a result" in out
    assert "s3://drill-" in out and "Placement for the next run" in out
    assert "Lifetime tau: no preemption" in out
    assert "tau is a lower bound (no preemption in" in out  # labelled: a bound, not an estimate
    assert "inputs: the numbers this run measured, the rest from out/workload.json" in out
    assert (tmp_path / "out" / "timeline.png").exists()
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["episodes"]["completed"] + doc["episodes"]["model_failures"] == 12


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--notice-s", "-1"], "--notice-s"),
        (["--lifetime-s", "0"], "--lifetime-s"),
        (["--server-command", "vllm serve m"], "{port}"),
        (["--eval-command", "python run.py --out {output}"], "{episode_id}"),
        (["--eval-command", "'unbalanced"], "--eval-command"),
        (["--episodes", "x"], "--episodes"),
        (["--manifest", "/nonexistent.jsonl", "--out", "OUT"], "/nonexistent.jsonl"),
    ],
)
def test_bad_drill_options_are_one_line_and_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert drill_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err


def test_episodes_in_flight_are_read_from_command_lines() -> None:
    procs = [
        drill.Proc(10, 1, ("python", "-m", "spoteval.agent", "--config", "a.json")),
        drill.Proc(11, 10, ("python", "-m", "spoteval.sample_episode", "--episode-id", "ep-0007")),
        drill.Proc(12, 10, ("bash", "-c", "run", "--id=ep-0009")),
        drill.Proc(13, 10, ("python", "-m", "spoteval.standin", "--port", "8000")),
    ]
    assert drill.episodes_in(procs, frozenset({"ep-0007", "ep-0009", "ep-0001"})) == {"ep-0007", "ep-0009"}
    assert [p.pid for p in drill.descendants(1, procs)] == [10, 11, 12, 13]
    assert drill.descendants(11, procs) == []


def test_lifetimes_are_exponential_with_the_given_mean() -> None:
    d = drill.Drill(drill.DrillConfig(out=Path("unused"), lifetime_s=45.0, seed=0))
    draws = [d.provider.lifetimes.expovariate(1 / 45.0) for _ in range(4000)]
    mean = sum(draws) / len(draws)
    assert abs(mean - 45.0) < 3 * 45.0 / math.sqrt(len(draws))


def test_episodes_are_identifiable_only_by_a_whole_episode_id_argument() -> None:
    assert drill.identifiable(drill.sample_eval_command(SETTINGS))
    assert drill.identifiable(("run", "--id={episode_id}", "{output}"))
    assert not drill.identifiable(("run", "--out", "/tmp/{episode_id}.json"))


def test_an_agent_refusing_the_drills_setup_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the model server never answers: the agent gives up waiting for it and the drill says so
    argv = ["--episodes", "4", "--out", str(tmp_path / "o"), "--timeout-s", "60"]
    argv += ["--server-command", f"{sys.executable} -c 'import sys; sys.exit(3)' {{port}}"]
    assert drill_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("drill: the agent exited with")


def test_the_drill_the_report_and_from_run_read_the_run_one_way(
    drilled: Drilled, capsys: pytest.CaptureFixture[str]
) -> None:
    """One reading of a run: the drill's own next placement, `scripts.report --workload` and
    `scripts.placement --from-run` on the drill's record and its workload.json decide alike."""
    from scripts import placement as placement_cli
    from scripts import report as report_cli

    workload = drilled.result.config.out / "workload.json"
    own = drill.report_of(drilled.result).placement
    assert own is not None
    url, run_id = drilled.result.store_url, drilled.result.run_id
    assert report_cli.main(["--store", url, "--run", run_id, "--workload", str(workload), "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)["placement"]
    assert placement_cli.main([str(workload), "--from-run", run_id, "--store", url, "--json"]) == 0
    decided = json.loads(capsys.readouterr().out)
    for doc in (reported, decided):
        assert doc["decision"] == own["decision"]
        assert doc["options"] == own["options"]
        assert doc["inputs"] == own["inputs"]
    # what the record lacks comes from the drill's file, never from the built-in example
    assert own["inputs"]["grant"]["price_cap"] is None and own["inputs"]["prices"]["on_demand"] == 3.4
