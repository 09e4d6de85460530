"""`python -m scripts.placement` as a user runs it: report, JSON, stacks, plots, traces, bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import placement as cli
from spoteval.placement import EXAMPLE_WORKLOAD, LoadedWorkload

REPO = Path(__file__).resolve().parents[1]
TRACE = (
    REPO / "tests" / "data" / "traces" / "preemption" / "1-node" / "aws-04-22-2023" / "us-west-2b_v100_1.json"
)


def write_workload(tmp_path: Path, changes: dict[str, Any] | None = None, name: str = "work.yaml") -> Path:
    raw = {**EXAMPLE_WORKLOAD, **(changes or {})}
    path = tmp_path / name
    path.write_text(yaml.safe_dump({k: v for k, v in raw.items() if v is not None}))
    return path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cli_as_a_user_runs_it_prints_the_json_decision() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.placement", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"decision", "reasons", "inputs", "options", "break_even", "simulated", "spot_policy"}
    assert doc["decision"] == "spot"
    assert set(doc["options"]) == {"spot", "on_demand", "non_preemptible"}
    assert set(doc["options"]["spot"]) == {
        "expected_cost",
        "billed_hours",
        "wall_hours",
        "efficiency",
        "p_deadline",
        "eligible",
        "why_not",
        "policy",
    }
    assert doc["options"]["spot"]["policy"] == doc["spot_policy"]["policy"] == "spot"
    assert set(doc["break_even"]) == {"tau_hours", "price_ratio"}
    assert doc["options"]["spot"]["expected_cost"] == pytest.approx(15.63892758, rel=1e-9)
    assert doc["simulated"]["runs"] == 2000
    assert set(doc["simulated"]["strategies"]) == {
        "spot",
        "spot_safety_net",
        "uniform_progress",
        "on_demand",
        "non_preemptible",
    }


def test_cli_bad_input_as_a_user_sees_it_is_one_line_without_traceback(tmp_path: Path) -> None:
    bad = write_workload(tmp_path, {"restart": {"wait_minutes": 30, "boot_minutes": -1}})
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.placement", str(bad)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == "error: workload.restart.boot_minutes: must be >= 0, got -1\n"


def test_a_deadline_shorter_than_the_work_is_refused_in_one_line(tmp_path: Path) -> None:
    # 2000 episodes of 12 min on 32 slots are 12.5 h of work at on-demand speed: 10 h cannot be met
    short = write_workload(tmp_path, {"deadline_hours": 10})
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.placement", str(short)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "error: workload.deadline_hours: 10 h is shorter than the work at on-demand speed, 12.5 h "
        "(N/C = 62.5 rounds of 0.2 h): no market can meet it (the work fits by then only on 2 or more "
        "nodes)\n"
    )
    # the work itself is not refused: 12.5 h leaves on-demand no time to boot, and says so
    code, doc = run_json_file(short, {"deadline_hours": 12.5})
    assert code == 3
    assert "beyond the 12.5 h deadline" in doc["options"]["on_demand"]["why_not"]


def run_json_file(path: Path, changes: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    raw = {**yaml.safe_load(path.read_text()), **changes}
    path.write_text(yaml.safe_dump(raw))
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.placement", str(path), "--json", "--runs", "200"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_the_decision_names_the_spot_policy_and_when_it_switches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    avail = REPO / "tests" / "data" / "traces" / "availability" / "1-node" / "aws-10-26-2022"
    workload = REPO / "docs" / "deadline-workload.yaml"
    code, doc = run_json(
        capsys, str(workload), "--trace", str(avail / "us-west-2b_v100_1.json"), "--runs", "300"
    )
    assert code == 0 and doc["decision"] == "spot"
    policy = doc["spot_policy"]
    assert policy["policy"] == doc["options"]["spot"]["policy"] == "uniform_progress"
    assert policy["meets_deadline"] and not policy["pinned"]
    assert set(policy["candidates"]) == {"spot", "spot_safety_net", "uniform_progress"}
    up, greedy = policy["candidates"]["uniform_progress"], policy["candidates"]["spot_safety_net"]
    assert up["p_deadline"] == greedy["p_deadline"] == 1.0
    assert up["mean_cost"] < greedy["mean_cost"] and up["spot_work_hours"] > greedy["spot_work_hours"]
    assert policy["candidates"]["spot"]["p_deadline"] < 0.95  # spot alone misses: it needs a policy
    assert doc["options"]["spot"]["expected_cost"] == pytest.approx(up["mean_cost"])
    assert policy["rule"] == (
        "spot whenever it is up; while it is not, on-demand once W > 0.833 x R (the job fraction "
        "50 h / 60 h), back to spot once W <= 0.833 x (R - 0.3 h) and spot is up; on-demand for good "
        "once R < W + 0.3 h (2B)"
    )
    first = up["first_switch"]
    reasons = doc["reasons"]
    assert any(
        r.startswith("spot policy: uniform_progress, the cheapest of the spot policies") for r in reasons
    )
    assert (
        f"uniform_progress's rule, in hours of work left W and hours to the deadline R: {policy['rule']}."
        in reasons
    )
    assert any(
        r.startswith(f"in 300 simulated runs {first['runs']:.0%} went on-demand, first at a median of")
        for r in reasons
    )
    # pinned, the policy is the workload's even where another is cheaper
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(workload.read_text() + "deadline_policy: spot_safety_net\n")
    code, doc = run_json(
        capsys, str(pinned), "--trace", str(avail / "us-west-2b_v100_1.json"), "--runs", "300"
    )
    assert code == 0
    assert doc["spot_policy"]["pinned"] and doc["options"]["spot"]["policy"] == "spot_safety_net"
    assert list(doc["spot_policy"]["candidates"]) == ["spot_safety_net"]
    assert doc["inputs"]["deadline_policy"] == "spot_safety_net"


def test_report_states_every_input_option_and_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for text in (
        "built-in example workload",
        "N = 2000",
        "D = 12 min",
        "C = 32",
        "n = N/C = 62.5",
        "tau = 6 h",
        "wait W = 30 min",
        "boot B = 9 min",
        "spot 1.2, on_demand 3.4, non_preemptible 2.1",
        "24 h, met with probability >= 0.9",
        "10%",
        "price_cap 2, budget 500",
        "15.6",  # spot's expected cost
        "43.0",  # on-demand's (a table column keeps its zeros)
        "26.6",  # non-preemptible's
        "95.9%",  # spot's efficiency
        "spot_safety_net",
        "Break-even",
        "tau = 4.63 min",  # 0.0771 h, in the unit that fits
        "Decision: spot",
        "spot is the only eligible option",
        "non_preemptible is not eligible: its price 2.1 per node-hour is above the grant's price_cap 2.",
    ):
        assert text in out, text
    assert "\x1b[" not in out  # no terminal codes when not on a terminal


def test_json_reports_options_break_even_and_simulation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_workload(tmp_path, {"grant": None})
    code, doc = run_json(capsys, str(path))
    assert code == 0
    assert doc["decision"] == "spot"
    assert doc["inputs"]["wait_hours"] == pytest.approx(0.5)
    assert doc["inputs"]["grant"]["budget"] is None
    assert all(o["eligible"] and o["why_not"] is None for o in doc["options"].values())
    assert doc["options"]["on_demand"]["p_deadline"] == 1.0
    assert doc["options"]["spot"]["p_deadline"] == doc["simulated"]["strategies"]["spot"]["p_deadline"]
    assert doc["break_even"]["price_ratio"] == pytest.approx(13.03243965 / (0.9 * 12.65), rel=1e-9)
    assert 0 < doc["break_even"]["tau_hours"] < 6
    assert doc["simulated"]["warnings"] == []
    assert doc["simulated"]["trace"] is None


def test_decision_none_exits_3_with_every_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_workload(tmp_path, {"grant": {"budget": 10}})
    code, doc = run_json(capsys, str(path))
    assert code == 3
    assert doc["decision"] == "none"
    assert len(doc["reasons"]) == 4
    assert cli.main([str(path)]) == 3
    assert "Decision: none" in capsys.readouterr().out


def test_seed_and_runs_reach_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    _, a = run_json(capsys, "--runs", "300", "--seed", "7")
    _, b = run_json(capsys, "--runs", "300", "--seed", "7")
    _, c = run_json(capsys, "--runs", "300", "--seed", "8")
    assert a["simulated"]["runs"] == 300
    assert a["simulated"] == b["simulated"]
    assert a["simulated"]["strategies"]["spot"] != c["simulated"]["strategies"]["spot"]


# --- stacks ---------------------------------------------------------------------------------------


def write_stack(stacks: Path, name: str, config: dict[str, Any]) -> None:
    stacks.mkdir(exist_ok=True)
    (stacks / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


def test_stack_workload_block_is_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    workload = {**EXAMPLE_WORKLOAD, "lifetime_hours": 0.5, "grant": None}
    write_stack(stacks, "aws-test", {"aws:region": "us-east-1", "spot-eval:workload": workload})
    code, doc = run_json(capsys, "--stack", "aws-test", "--stacks-dir", str(stacks))
    assert code == 0
    assert doc["inputs"]["lifetime_hours"] == 0.5
    assert cli.main(["--stack", "aws-test", "--stacks-dir", str(stacks)]) == 0
    assert "stack aws-test" in capsys.readouterr().out


def test_stack_errors_name_the_key_in_the_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    workload = {**EXAMPLE_WORKLOAD, "restart": {"wait_minutes": 30, "boot_minutes": -1}, "grant": None}
    write_stack(stacks, "bad", {"spot-eval:workload": workload})
    assert cli.main(["--stack", "bad", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert err == "error: spot-eval:workload.restart.boot_minutes: must be >= 0, got -1\n"


def test_missing_stack_and_stack_without_workload_are_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stacks = tmp_path / "stacks"
    write_stack(stacks, "bare", {"aws:region": "us-east-1"})
    assert cli.main(["--stack", "absent", "--stacks-dir", str(stacks)]) == 2
    assert capsys.readouterr().err == (
        f"error: stack 'absent': no {stacks / 'Pulumi.absent.yaml'} (stacks: bare)\n"
    )
    assert cli.main(["--stack", "bare", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert "config.spot-eval:workload: missing" in err
    assert err.count("\n") == 1
    assert cli.main(["--stack", "../etc", "--stacks-dir", str(stacks)]) == 2
    assert "not a stack name" in capsys.readouterr().err


REPO_STACKS = sorted((REPO / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.skipif(not REPO_STACKS, reason="no stack files in stacks/")
@pytest.mark.parametrize("stack", [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in REPO_STACKS])
def test_every_stack_of_the_repository_gives_a_decision(
    capsys: pytest.CaptureFixture[str], stack: str
) -> None:
    code, doc = run_json(capsys, "--stack", stack, "--runs", "200")
    assert code in (0, 3)
    assert doc["decision"] in ("spot", "on_demand", "non_preemptible", "none")


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"episodes": None}, "workload.episodes: missing"),
        ({"colour": "blue"}, "workload.colour: unknown key"),
        (
            {"restart": {"wait_minutes": -30, "boot_minutes": 9}},
            "workload.restart.wait_minutes: must be >= 0",
        ),
        ({"episode_minutes": 0}, "workload.episode_minutes: must be > 0"),
        ({"lifetime_hours": 0}, "workload.lifetime_hours: must be > 0"),
        ({"episodes": 0}, "workload.episodes: must be > 0"),
        ({"concurrency": 0}, "workload.concurrency: must be > 0"),
        ({"nodes": 0}, "workload.nodes: must be > 0"),
        ({"nodes": -2}, "workload.nodes: must be > 0"),
        ({"prices": {"spot": 1.2, "on_demand": -3.4}}, "workload.prices.on_demand: must be >= 0"),
        ({"grant": {"price_cap": "high"}}, "workload.grant.price_cap: must be a number"),
    ],
)
def test_bad_workload_exits_2_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, changes: dict[str, Any], key: str
) -> None:
    path = write_workload(tmp_path, changes)
    assert cli.main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {key}")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("episodes: [2000\nconcurrency: 32\n", "malformed YAML at line 2 column 12"),
        ("episodes: 2000\n  concurrency: 32\n", "malformed YAML at line 2 column 14"),
        ("- 2000\n- 32\n", "the workload file must be a mapping of keys, not a list"),
        ("", "the workload file is empty (it must be a mapping of keys)"),
        ("# only a comment\n", "the workload file is empty (it must be a mapping of keys)"),
    ],
)
def test_malformed_workload_file_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "work.yaml"
    path.write_text(text)
    assert cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ")
    assert problem in err
    assert err.count("\n") == 1


def test_missing_workload_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main([str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'absent.yaml'}: workload file not found\n"


def test_trace_waits_need_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--waits", "trace"]) == 2
    assert "--waits: trace needs --trace FILE" in capsys.readouterr().err


# --- plot, trace, hooks ---------------------------------------------------------------------------


def test_plot_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    workload = write_workload(tmp_path, {"grant": None, "lifetime_interval_hours": [3, 12]})
    png = tmp_path / "cost.png"
    assert cli.main([str(workload), "--plot", str(png), "--runs", "200"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
    assert f"plot written to {png}" in capsys.readouterr().out


def test_plot_to_an_unwritable_place_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["--plot", str(tmp_path / "no" / "such" / "dir" / "cost.png"), "--runs", "100"]) == 2
    assert capsys.readouterr().err.startswith("error: --plot: cannot write")


def test_trace_replay_reports_the_trace_and_its_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "--trace", str(TRACE))
    # the V100 trace, replayed in order, makes spot alone miss the 24 h deadline; the policies that
    # meet it go on-demand at 3.40, above the cap of 2.00, which also excludes the other options
    assert code == 3
    sim = doc["simulated"]
    assert sim["engine"] == "ticks"
    assert "replayed in order from 2000 start ticks of the preemption trace" in sim["ticks"]
    assert sim["trace"]["kind"] == "preemption"
    assert sim["trace"]["preemptions"] == 44
    assert sim["trace"]["tau_hours"] == pytest.approx(3.20, rel=0.01)
    assert any("not exponential" in w for w in sim["warnings"])
    assert any("outside the trace's 95% interval" in w for w in sim["warnings"])
    assert sim["strategies"]["spot"]["p_deadline"] < 0.9
    spot = doc["options"]["spot"]
    assert spot["policy"] == doc["spot_policy"]["policy"] == "spot_safety_net"
    assert spot["p_deadline"] == sim["strategies"]["spot_safety_net"]["p_deadline"] == 1.0
    assert spot["why_not"] == (
        "its policy spot_safety_net goes on-demand at 3.4 per node-hour, above the grant's price_cap 2"
    )
    assert not doc["spot_policy"]["meets_deadline"]
    # drawn independently (the order-free replay), the lifetimes and waits are the trace's runs
    code, doc = run_json(capsys, "--trace", str(TRACE), "--replay", "draw")
    assert code == 3
    assert doc["simulated"]["engine"] == "lockstep"
    assert "44 trace lifetimes" in doc["simulated"]["lifetimes"]
    assert "44 trace capacity waits" in doc["simulated"]["waits"]
    assert cli.main(["--trace", str(TRACE), "--runs", "200"]) == 3
    assert "coefficient of variation 1.60" in capsys.readouterr().out


def test_a_trace_that_cannot_be_read_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["--trace", str(tmp_path / "absent.json")]) == 2
    assert "trace file not found" in capsys.readouterr().err
    never = tmp_path / "never.json"
    never.write_text('{"metadata": {"gap_seconds": 60}, "data": [0, 0, 0]}')
    # the published values count the instances up: no tick has one
    assert cli.main(["--trace", str(never), "--runs", "50"]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {never}: spot is never up in the trace: there is nothing to replay\n"
    )
    # read as the paper's simulator reads its own files (0 = up): spot that is never taken
    assert (
        cli.main(["--trace", str(never), "--trace-values", "preempted", "--replay", "draw", "--runs", "50"])
        == 2
    )
    assert "no preemption in the trace" in capsys.readouterr().err
    assert cli.main(["--trace", str(never), "--trace-values", "preempted", "--runs", "50"]) == 0
    capsys.readouterr()
    assert cli.main(["--replay", "draw"]) == 2
    assert capsys.readouterr().err == "error: --replay: needs --trace FILE\n"
    assert cli.main(["--trace", str(never), "--waits", "fixed"]) == 2
    assert "the ordered replay takes its waits from the trace" in capsys.readouterr().err


class _MeasuredLifetime:
    """A hook as a run-record reader would be: an option, and measured numbers over the configured."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--measured-tau", type=float)

    def apply(self, args: argparse.Namespace, loaded: LoadedWorkload) -> LoadedWorkload:
        if args.measured_tau is None:
            return loaded
        raw = {**loaded.raw, "lifetime_hours": args.measured_tau}
        return LoadedWorkload(raw=raw, where=loaded.where, source=f"{loaded.source} + measured tau")


def test_input_hooks_add_options_and_refine_the_workload(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "INPUT_HOOKS", [_MeasuredLifetime()])
    code, doc = run_json(capsys, "--measured-tau", "2.5", "--runs", "100")
    assert code == 0
    assert doc["inputs"]["lifetime_hours"] == 2.5


@pytest.mark.parametrize("argv", [["--bogus"], ["--runs", "0"], ["--json", "--runs", "many"]])
def test_option_errors_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: options: ") and err.count("\n") == 1
