"""The run report on hand-written records: allocations, tau, S, outcomes, cost, efficiency, redaction."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import chi2

from scripts import report as report_cli
from spoteval import placement, report
from spoteval.record import Attempt, Event, RunLayout, format_time
from spoteval.store import Store
from tests.conftest import StoreTarget

RUN = "r-demo-7f3a"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
LAYOUT = RunLayout(RUN)
NOW = T0 + timedelta(seconds=9000)

A, B, C = "i-0aaa111", "i-0bbb333", "i-0ccc444"
# distinctive prices, so that a price leaking into a shared report is found by its digits
P_A1, P_A1B, P_A2, P_B1, P_B2, P_C1, P_C2 = 0.8123, 0.9177, 0.8561, 0.8123, 0.8049, 0.8311, 0.8267
ACCOUNT = "123456789012"
ADDRESSES = ("203.0.113.17", "198.51.100.9", "198.51.100.23", "198.51.100.24")


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def ev(
    s: float, node: str, kind: str, reason: str | None = None, price: float | None = None, **details: Any
) -> Event:
    return Event(
        time=at(s),
        run_id=RUN,
        node=node,
        kind=kind,
        reason=reason,
        provider="aws",
        region="us-east-1",
        zone="us-east-1b",
        instance_type="g6.xlarge",
        market="spot",
        price_per_hour=price,
        currency="USD" if price is not None else None,
        price_source="api" if price is not None else "unknown",
        details=details,
    )


def att(episode: str, n: int, outcome: str, node: str, start: float, end: float, **extra: Any) -> Attempt:
    return Attempt(
        episode_id=episode,
        outcome=outcome,
        attempt=n,
        node=node,
        started=at(start),
        ended=at(end),
        output={"score": 1.0} if outcome == "completed" else None,
        error="exit 1" if outcome == "model_failure" else None,
        extra=extra,
    )


EVENTS = [
    # node A: preempted with notice, then restarted and stopped when done
    ev(0, A, "start", "initial", P_A1, instance_id=A, public_ip=ADDRESSES[0], concurrency=4, heartbeat_s=30),
    ev(60, A, "ready", None, image_pull_s=8.5, server_healthy_s=50.0),
    ev(90, A, "heartbeat"),
    ev(120, A, "notice", "rebalance_recommendation"),
    ev(150, A, "heartbeat", None, P_A1B),
    ev(3600, A, "notice", "spot_interruption", action="terminate"),
    ev(3720, A, "preempted", "provider", instance_id=A, account_id=ACCOUNT),
    ev(4320, A, "start", "restart_after_preemption", P_A2, instance_id="i-0aaa222", address=ADDRESSES[1]),
    ev(4380, A, "ready", None, image_pull_s=2.5, server_healthy_s=40.0),
    ev(5000, A, "heartbeat"),
    ev(7200, A, "stop", "done"),
    # node B: vanished without notice (bounded by its last heartbeat), restarted, stopped by a rule
    ev(100, B, "start", "initial", P_B1),
    ev(190, B, "ready"),
    ev(220, B, "heartbeat"),
    ev(250, B, "heartbeat"),
    ev(280, B, "heartbeat"),
    ev(1000, B, "start", "restart_after_preemption", P_B2),
    ev(1080, B, "ready"),
    ev(1500, B, "heartbeat"),
    # node C: an agent run stopped by a restart measurement (scripts/measure_restart.py), one measured
    # cycle as that script records it, and the node left stopped
    ev(7000, C, "start", "initial", P_C1),
    ev(
        8000,
        C,
        "stop",
        "measurement",
        P_C1,
        source="measure_restart",
        mode="stop-start",
        cycle=1,
        phase_s=12.0,
    ),
    ev(
        8100,
        C,
        "start",
        "measurement",
        P_C2,
        source="measure_restart",
        cycle=1,
        by="request",
        hostname="ip-10-0-0-7",
    ),
    ev(8160, C, "start", "restart_after_stop", P_C2),
    ev(8190, C, "ready"),
    ev(
        8195,
        C,
        "heartbeat",
        None,
        P_C2,
        source="measure_restart",
        mode="stop-start",
        cycle=1,
        measured={
            "stop": 12.0,
            "price_check": 0.4,
            "start": 55.0,
            "serve": 30.0,
            "first_token": 0.5,
            "agent_ready": 9.5,
        },
        s_wait_s=55.0,
        s_boot_s=40.0,
        total_s=95.0,
        address_before=ADDRESSES[2],
        address=ADDRESSES[3],
        address_changed=True,
    ),
    ev(8200, C, "stop", "measurement", P_C2, source="measure_restart", leave="stopped", outcome="completed"),
]

ATTEMPTS = [
    att("e1", 1, "completed", A, 100, 400),
    att("e2", 1, "interrupted", A, 3500, 3650),
    att("e2", 2, "completed", A, 4400, 4700),
    att("e3", 1, "interrupted", B, 200, 1005),  # recorded by the next incarnation: capped at 280
    att("e3", 2, "model_failure", B, 1100, 1200, gpu_util=0.9),
    att("e3", 3, "model_failure", B, 1200, 1300),
    att("e4", 1, "completed", A, 4500, 5000),
]
RESULTS = {"e1": ATTEMPTS[0], "e2": ATTEMPTS[2], "e3": ATTEMPTS[5], "e4": ATTEMPTS[6]}
MANIFEST = "".join(json.dumps({"id": f"e{i}", "task": f"t{i}"}) + "\n" for i in range(1, 7)).encode()


def write_record(store: Store) -> None:
    store.put_new(LAYOUT.manifest, MANIFEST)
    for seq, e in enumerate(EVENTS):
        assert store.put_new(LAYOUT.event(e.time, e.node, seq), e.dumps())
    # an unknown reason on a stop (still closes node B's second allocation), an unknown kind with an
    # unknown field holding an account id, malformed objects
    bad_stop = json.loads(ev(2000, B, "stop", "done").dumps())
    bad_stop["reason"] = "stop_rule:moon"
    store.put_new(LAYOUT.event(at(2000), B, 900), json.dumps(bad_stop).encode())
    odd = json.loads(ev(500, A, "heartbeat").dumps())
    odd.update(kind="resized", cluster_arn=f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/secret-cluster")
    store.put_new(LAYOUT.event(at(500), A, 901), json.dumps(odd).encode())
    store.put_new(LAYOUT.event(at(501), A, 902), b"{not json")
    store.put_new(LAYOUT.event(at(502), A, 903), b"[1, 2, 3]")
    store.put_new(LAYOUT.event(at(503), A, 904), json.dumps({"kind": "heartbeat", "node": A}).encode())
    for a in ATTEMPTS:
        store.put_new(LAYOUT.attempt(a.episode_id, a.attempt), a.dumps())
    for episode, a in RESULTS.items():
        store.put_new(LAYOUT.result(episode), a.dumps(as_result=True))
    skipped = json.loads(att("e6", 1, "completed", A, 4800, 4900).dumps())
    skipped["outcome"] = "skipped"
    store.put_new(LAYOUT.attempt("e6", 1), json.dumps(skipped).encode())
    store.put_new(LAYOUT.attempt("e5", 1), b"\x00\x01 not an attempt")


@dataclass
class Built:
    store: Store
    url: str
    report: report.RunReport


@pytest.fixture
def built(tmp_path: Path) -> Built:
    url = f"file://{tmp_path}/bucket-private-name"
    store = Store(url)
    write_record(store)
    rep = report.analyse(report.load_run(store, RUN), now=NOW)
    return Built(store, url, rep)


def allocs_of(rep: report.RunReport, node: str) -> list[report.Allocation]:
    return [a for a in rep.allocations if a.node == node]


# --- allocations ---------------------------------------------------------------------------------


def test_allocations_run_from_start_to_preempted_or_stop(built: Built) -> None:
    a1, a2 = allocs_of(built.report, A)
    assert (a1.start, a1.end, a1.ended_by, a1.end_reason) == (at(0), at(3720), "preempted", "provider")
    assert a1.notice == at(3600)  # the spot interruption, not the rebalance recommendation
    assert not a1.censored
    assert (a2.start, a2.end, a2.ended_by, a2.end_reason) == (at(4320), at(7200), "stop", "done")
    assert a2.censored and a2.start_reason == "restart_after_preemption"


def test_a_node_lost_without_notice_is_bounded_by_its_last_heartbeat(built: Built) -> None:
    b1, b2 = allocs_of(built.report, B)
    assert (b1.end, b1.ended_by, b1.censored) == (at(280), "lost", False)
    # an unknown stop reason still closes the allocation, and is reported
    assert (b2.end, b2.ended_by, b2.end_reason, b2.censored) == (at(2000), "stop", "stop_rule:moon", True)
    assert any("stop_rule:moon" in p.message for p in built.report.problems)


def test_a_silent_allocation_is_running_until_three_heartbeats_pass() -> None:
    events = [ev(0, A, "start", "initial", 1.0, heartbeat_s=30), ev(60, A, "heartbeat")]
    running, _, _ = report.allocations(events, now=at(100))
    lost, _, _ = report.allocations(events, now=at(60 + 91))
    assert (running[0].ended_by, running[0].censored) == ("running", True)
    assert (lost[0].ended_by, lost[0].end, lost[0].censored) == ("lost", at(60), False)


def test_a_measured_start_merges_with_the_agent_start_on_the_same_node(built: Built) -> None:
    c1, c2 = allocs_of(built.report, C)
    assert (c1.ended_by, c1.end_reason, c1.kind) == ("stop", "measurement", "run")
    assert (c2.kind, c2.start, c2.agent_start, c2.ready, c2.end) == (
        "measurement",
        at(8100),
        at(8160),
        at(8190),
        at(8200),
    )


# --- tau and S -----------------------------------------------------------------------------------


def test_tau_is_uptime_over_preemptions_with_stopped_allocations_censored(built: Built) -> None:
    tau = built.report.tau
    assert tau is not None
    uptime = 3720 + 2880 + 180 + 1000 + 1000 + 100
    assert tau.preemptions == 2  # A preempted, B lost; every stopped allocation is censored
    assert tau.censored == 4
    assert tau.uptime_s == pytest.approx(uptime)
    assert tau.seconds == pytest.approx(uptime / 2)
    low = 2 * uptime / chi2.ppf(0.975, 2 * 2 + 2)
    high = 2 * uptime / chi2.ppf(0.025, 2 * 2)
    assert tau.low_s == pytest.approx(low, rel=1e-6)
    assert tau.high_s == pytest.approx(high, rel=1e-6)


def test_s_wait_and_s_boot_by_phase(built: Built) -> None:
    rep = built.report
    assert rep.wait is not None and rep.boot is not None
    assert sorted(g.seconds for g in rep.gaps if g.kind == "capacity") == [600, 720]
    assert [rep.wait.median, rep.wait.p90, rep.wait.mean] == pytest.approx([660, 708, 660])
    # start -> first episode dispatched: A1 100, A2 80, B1 100, B2 100 (C1 ran nothing and was never ready)
    assert rep.boot.n == 4 and rep.boot.mean == pytest.approx(95) and rep.boot.median == 100
    assert rep.notice_tail is not None and (rep.notice_tail.n, rep.notice_tail.max) == (1, 120)
    phases = rep.boot_phases
    assert phases["start -> ready"].n == 4
    assert phases["ready.image_pull_s"].median == pytest.approx(5.5)
    assert phases["ready.server_healthy_s"].max == 50.0


def test_restart_measurements_are_reported_apart(built: Built) -> None:
    rep = built.report
    assert rep.measured_wait is not None and rep.measured_boot is not None
    # as the measurement recorded each cycle: S_wait = start requested -> running, S_boot after it
    assert (rep.measured_wait.n, rep.measured_wait.median, rep.measured_boot.median) == (1, 55.0, 40.0)
    assert rep.measured_phases["cycle phase: serve"].median == 30.0
    # and from the record's own events: start request -> the agent's start and ready
    assert rep.measured_phases["start -> agent start"].median == 60
    assert rep.measured_phases["start -> ready"].median == 90
    # the run's own restarts are kept apart from the measured ones
    assert rep.wait is not None and rep.wait.n == 2


def test_a_simulated_preemption_is_censored() -> None:
    events = [
        ev(0, C, "start", "initial", 1.0),
        ev(100, C, "preempted", "provider", source="measure_restart", simulated=True, cycle=1),
        ev(130, C, "start", "measurement", 1.0, source="measure_restart", cycle=1),
        ev(200, C, "stop", "measurement"),
    ]
    allocs, gaps, _ = report.allocations(events, now=NOW)
    assert [(a.ended_by, a.end_reason, a.censored) for a in allocs] == [
        ("stop", "simulated_preemption", True),
        ("stop", "measurement", True),
    ]
    assert [g.kind for g in gaps] == ["measurement"]


def test_our_stop_after_its_shutdown_sigterm_is_censored_a_provider_notice_is_not() -> None:
    ours = [
        ev(0, C, "start", "initial", 1.0),
        ev(90, C, "notice", "sigterm"),  # the OS shutdown of the measured stop
        ev(100, C, "stop", "measurement"),
    ]
    allocs, _, _ = report.allocations(ours, now=NOW)
    assert [(a.ended_by, a.censored) for a in allocs] == [("stop", True)]
    theirs = [
        ev(0, C, "start", "initial", 1.0),
        ev(90, C, "notice", "spot_interruption"),
        ev(100, C, "stop", "user"),
    ]
    allocs, _, _ = report.allocations(theirs, now=NOW)
    assert [(a.ended_by, a.censored) for a in allocs] == [("notice", False)]


def test_malformed_numbers_and_ids_are_reported_not_raised(tmp_path: Path) -> None:
    store = Store(f"file://{tmp_path}/s")
    layout = RunLayout("r1")
    store.put_new(layout.manifest, b'{"id": "e1"}\n')
    start = ev(0, C, "start", "initial", 1.0).to_json()
    start["price_per_hour"] = 10**400  # overflows a float
    store.put_new(layout.event(T0, C, 1), json.dumps(start).encode())
    store.put_new(f"{layout.results_prefix}bad id.json", b'{"episode_id": "bad id"}')
    record = report.load_run(store, "r1")
    assert any("price_per_hour" in p.message for p in record.problems)
    assert any("bad id" in p.key for p in record.problems)


# --- episodes, cost, efficiency ------------------------------------------------------------------


def test_episode_outcomes_and_the_time_interrupted_attempts_lost(built: Built) -> None:
    ep = built.report.episodes
    assert (ep.manifest, ep.completed, ep.model_failures, ep.pending) == (6, 3, 1, 2)
    assert ep.attempts == {"completed": 3, "interrupted": 2, "model_failure": 2, "skipped": 1}
    assert (ep.concurrency, ep.concurrency_source) == (4, "configured")
    # e2: 150 s inside its allocation; e3: started 200, its node was last seen at 280
    assert ep.interrupted_lost_s == pytest.approx(150 + 80)
    assert ep.lost_node_hours == pytest.approx(230 / 4 / 3600)


def test_cost_is_each_logged_price_times_its_billed_interval(built: Built) -> None:
    expected = (
        P_A1 * 150 + P_A1B * (3720 - 150) + P_A2 * 2880 + P_B1 * 180 + P_B2 * 1000 + P_C1 * 1000 + P_C2 * 100
    ) / 3600
    assert built.report.cost == {"USD": pytest.approx(expected)}
    assert built.report.unpriced == 0
    out = report.report_json(built.report)
    assert out["lost_cost"]["USD"] == pytest.approx((P_A1B * 150 + P_B1 * 80) / 3600 / 4)


def test_efficiency_is_measured_and_predicted_by_the_closed_form(built: Built) -> None:
    eff = built.report.efficiency
    durations = [300, 300, 100, 100, 500]
    billed = 3720 + 2880 + 180 + 1000 + 1000  # the run's allocations, not the measurement
    assert eff.billed_node_hours == pytest.approx(billed / 3600)
    assert eff.measured == pytest.approx(sum(durations) / 4 / billed)
    # B: S_boot 95 s plus the billed notice tail per preemption (A: 120 s from notice to end; B: none)
    tau, boot = (billed + 100) / 2, 95.0 + (120 + 0) / 2
    assert (eff.boot_s, eff.notice_tail_s, eff.restart_overhead_s) == (95.0, 60.0, 155.0)
    predicted_billed = 5 / 4 * tau * math.exp(boot / tau) * sum(math.expm1(d / tau) for d in durations) / 5
    assert eff.predicted == pytest.approx(5 / 4 * 260 / predicted_billed)


def test_workload_from_run_is_a_placement_workload_of_the_measured_numbers(built: Built) -> None:
    base = {"prices": {"on_demand": 3.4}, "deadline_hours": 48, "episode_minutes": 99}
    raw = report.workload_from_run(built.report, base)
    wl = placement.parse_workload(raw)
    assert wl.episodes == 6 and wl.concurrency == 4
    assert wl.lifetime_hours == pytest.approx(4440 / 3600)
    assert wl.wait_hours == pytest.approx(660 / 3600) and wl.boot_hours == pytest.approx(155 / 3600)
    assert sorted(wl.episode_samples_hours) == pytest.approx(
        sorted(d / 3600 for d in (300, 300, 100, 100, 500))
    )
    assert wl.prices.on_demand == 3.4 and wl.deadline_hours == 48
    spot_cost = sum(built.report.cost.values()) - P_C2 * 100 / 3600
    assert wl.prices.spot == pytest.approx(spot_cost / (8780 / 3600), rel=0.01)


# --- problems ------------------------------------------------------------------------------------


def test_unknown_kinds_reasons_outcomes_and_fields_are_reported_not_fatal(built: Built) -> None:
    messages = [(p.category, p.message) for p in built.report.problems]
    assert (
        "unknown_value",
        "unknown event kind 'resized' (known: heartbeat, notice, preempted, ready, start, stop)",
    ) in messages
    assert any(c == "unknown_value" and "stop_rule:moon" in m for c, m in messages)
    assert any(c == "unknown_value" and "'skipped'" in m for c, m in messages)
    assert ("unknown_field", "unknown event fields: cluster_arn") in messages
    assert ("unknown_field", "unknown attempt fields: gpu_util") in messages


def test_malformed_objects_are_reported_with_their_keys(built: Built) -> None:
    malformed = [p for p in built.report.problems if p.category == "malformed"]
    assert len(malformed) == 4  # not JSON, a list, no time, an attempt of bytes
    assert {p.key.split("/")[2] for p in malformed} == {"events", "attempts"}
    text = report.render(built.report)
    assert "Problems in the record" in text and "not JSON" in text


def test_a_run_with_nothing_but_garbage_still_reports() -> None:
    rec = report.parse_record(RUN, {LAYOUT.event(at(0), A, 0): b"garbage"})
    rep = report.analyse(rec, now=NOW)
    assert rep.allocations == () and rep.tau is None and rep.efficiency.measured is None
    assert {p.category for p in rep.problems} == {"malformed", "missing"}
    assert "Efficiency: not measurable" in report.render(rep)


# --- shared report -------------------------------------------------------------------------------


def private_identifiers(url: str) -> set[str]:
    """Every private identifier in the hand-written record, collected independently of the code."""
    bucket = url.split("://", 1)[1].split("/", 1)[0] or url.rsplit("/", 1)[-1]
    found = {RUN, A, B, C, "i-0aaa222", "ip-10-0-0-7", ACCOUNT, *ADDRESSES, bucket, "us-east-1b"}
    found |= {"secret-cluster", f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/secret-cluster"}
    for price in (P_A1, P_A1B, P_A2, P_B1, P_B2, P_C1, P_C2):
        found |= {f"{price}", f"{price:.4f}"}
    return found


def test_shared_report_carries_no_private_identifier(s3_target: StoreTarget) -> None:
    store = Store(s3_target.url, s3_target.options)
    write_record(store)
    rep = report.analyse(report.load_run(store, RUN), now=NOW)
    decided = report.with_placement(
        rep, _decide, report.workload_from_run(rep, {"prices": {"on_demand": 3.4}})
    )
    total = sum(decided.cost.values())
    secrets = private_identifiers(s3_target.url) | {f"{total:.4f}", f"{total:.6f}"}
    private_text = report.render(decided)
    private_json = json.dumps(report.report_json(decided))
    shared_text = report.render(decided, shared=True)
    shared_json = json.dumps(report.report_json(decided, shared=True))
    # the private report does carry them (so the test can fail), the shared one none
    assert {RUN, A, ADDRESSES[0], ACCOUNT} <= {s for s in secrets if s in private_json}
    assert f"{P_A2:.3g}" in private_text and RUN in private_text
    leaks = sorted(s for s in secrets if s in shared_text or s in shared_json)
    assert leaks == []
    # the text rounds prices to three significant digits: none of those, as a whole figure, either
    for price in (P_A1, P_A1B, P_A2, P_B1, P_B2, P_C1, P_C2):
        assert not re.search(rf"(?<![\d.]){re.escape(f'{price:.3g}')}(?!\d)", shared_text), price
    assert "node-1" in shared_text and "Lifetime tau" in shared_text
    assert json.loads(shared_json)["placement"]["decision"] == decided.placement["decision"]  # type: ignore[index]


def test_shared_json_scrubs_identifiers_hidden_in_unknown_values() -> None:
    start = ev(0, A, "start", "initial", 1.0).to_json()
    stop = ev(600, A, "stop", "done").to_json()
    stop["reason"] = f"evicted-{A}"  # an unknown reason that names the instance
    objects = {
        LAYOUT.event(at(0), A, 0): json.dumps(start).encode(),
        LAYOUT.event(at(600), A, 1): json.dumps(stop).encode(),
    }
    rep = report.analyse(report.parse_record(RUN, objects), now=NOW)
    assert A in json.dumps(report.report_json(rep))
    shared = json.dumps(report.report_json(rep, shared=True))
    assert A not in shared and RUN not in shared


def _decide(raw: Any) -> dict[str, Any]:
    return report.decide(raw)


# --- the command ---------------------------------------------------------------------------------


def test_cli_prints_the_report_json_and_plot(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "t.png"
    assert report_cli.main(["--store", built.url, "--run", RUN, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Allocations" in out and "Lifetime tau" in out and "Placement for the next run" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report_cli.main(["--store", built.url, "--run", RUN, "--json", "--shared"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["shared"] is True and doc["tau"]["preemptions"] == 2
    assert RUN not in json.dumps(doc)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--run", RUN], "--store"),
        (["--store", "ftp://x/y", "--run", RUN], "unknown scheme"),
        (["--store", "URL", "--run", "no-such-run"], "no run 'no-such-run'"),
        (["--store", "URL", "--run", "../x"], "--run"),
        (["--store", "URL", "--run", RUN, "--workload", "/nonexistent.yaml"], "/nonexistent.yaml"),
        (
            ["--stack", "aws-us-east-1", "--outputs", "/nonexistent.json"],
            "/nonexistent.json: outputs file not found",
        ),
        (["--stack", "nope", "--outputs", "/nonexistent.json"], "stack 'nope': no stacks/Pulumi.nope.yaml"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    built: Built, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [built.url if a == "URL" else a for a in argv]
    assert report_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and "Traceback" not in err


def test_formats_of_durations() -> None:
    assert [report.fmt_s(s) for s in (42.14, 210, 9000, None)] == ["42.1 s", "3.5 min", "2.5 h", "-"]
    assert format_time(at(0)) == "2026-03-02T09:00:00.000000Z"


def test_a_vm_is_billed_from_machine_boot_as_the_ready_event_gives_it() -> None:
    events = [
        ev(100, A, "start", "initial", 1.0),
        ev(160, A, "ready", None, boot_to_agent_s=40.0, boot_source="boot_file"),
        ev(400, A, "stop", "done"),
    ]
    (alloc,), _, _ = report.allocations(events, now=NOW)
    assert (alloc.start, alloc.agent_start, alloc.seconds) == (at(60), at(100), 340)
    local = [replace(e, provider="local") for e in events]
    (alloc,), _, _ = report.allocations(local, now=NOW)
    assert (alloc.start, alloc.seconds) == (
        at(100),
        300,
    )  # billed from the agent's start, as the agent counts


def test_placement_from_run_reads_the_same_record(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts import placement as placement_cli
    from spoteval.report.from_run import FromRun

    monkeypatch.setattr(placement_cli, "INPUT_HOOKS", [FromRun()])
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "episodes: 10\nepisode_minutes: 1\nconcurrency: 1\nlifetime_hours: 9\n"
        "restart: {wait_minutes: 1, boot_minutes: 1}\nprices: {spot: 9, on_demand: 3.4}\n"
    )
    code = placement_cli.main([str(workload), "--from-run", RUN, "--store", built.url, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["inputs"]["lifetime_hours"] == pytest.approx(4440 / 3600)
    assert doc["inputs"]["concurrency"] == 4 and doc["inputs"]["episodes"] == 6
    assert doc["inputs"]["prices"]["on_demand"] == 3.4 and doc["inputs"]["prices"]["spot"] < 1
    # the report's own decision is the same document
    expected = report.decide(report.workload_from_run(built.report, {"prices": {"on_demand": 3.4}}))
    assert doc["decision"] == expected["decision"] and doc["options"] == expected["options"]
    assert placement_cli.main([str(workload), "--from-run", RUN]) == 2
    assert "--from-run: needs --store" in capsys.readouterr().err


def test_a_node_taken_while_booting_is_an_allocation_from_the_providers_launch_time() -> None:
    events = [
        ev(0, A, "start", "initial", 1.0),
        ev(50, A, "preempted", "provider"),
        ev(70, A, "preempted", "provider", launch_time=format_time(at(60))),
        ev(90, A, "start", "restart_after_preemption", 1.0),
        ev(100, A, "stop", "done"),
    ]
    allocs, gaps, problems = report.allocations(events, now=NOW)
    assert [(a.start, a.end, a.ended_by, a.start_reason) for a in allocs] == [
        (at(0), at(50), "preempted", "initial"),
        (at(60), at(70), "preempted", None),
        (at(90), at(100), "stop", "restart_after_preemption"),
    ]
    assert [g.seconds for g in gaps] == [10, 20] and problems == []
    # without the launch time the event is reported, not guessed
    _, _, problems = report.allocations([*events[:2], replace(events[2], details={}), *events[3:]], now=NOW)
    assert [p.category for p in problems] == ["inconsistent"]


def test_stack_outputs_name_the_store_and_the_run(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"bucket_url": built.url, "run_id": RUN, "provider": "aws"}))
    assert report_cli.main(["--stack", "aws-us-east-1", "--outputs", str(outputs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == RUN
    # the stack is found as every command finds it, outputs or not
    assert report_cli.main(["--stack", "no-such-stack", "--outputs", str(outputs)]) == 2
    assert "stack 'no-such-stack': no stacks/Pulumi.no-such-stack.yaml" in capsys.readouterr().err
    outputs.write_text(json.dumps({"bucket_url": built.url}))
    assert report_cli.main(["--stack", "aws-us-east-1", "--outputs", str(outputs)]) == 2
    assert "the outputs have no 'run_id'" in capsys.readouterr().err


def test_a_run_without_a_restart_names_what_it_could_not_measure(tmp_path: Path) -> None:
    store = Store(f"file://{tmp_path}/s")
    store.put_new(LAYOUT.manifest, MANIFEST)
    for seq, e in enumerate([ev(0, A, "start", "initial", 1.0, concurrency=2), ev(600, A, "stop", "done")]):
        store.put_new(LAYOUT.event(e.time, e.node, seq), e.dumps())
    a = att("e1", 1, "completed", A, 10, 70)
    store.put_new(LAYOUT.attempt("e1", 1), a.dumps())
    no_wait = report.build(store, RUN, {"prices": {"on_demand": 3.0}}, "prices from the test")
    assert no_wait.placement is None
    assert no_wait.placement_note == (
        "not decided: the numbers this run measured, the rest from prices from the test; tau "
        "is a lower bound (no preemption in "
        "10 min of uptime in run r-demo-7f3a: the 95% interval's low end); not measured in this run and "
        "not given: restart.wait_minutes (no restart after a preemption): give them in --workload FILE"
    )
    given = report.build(store, RUN, {"prices": {"on_demand": 3.0}, "restart": {"wait_minutes": 5}}, "test")
    assert given.placement is not None and given.placement["decision"] in ("spot", "on_demand")
    assert given.placement_note == (
        "the numbers this run measured, the rest from test; not measured in this run, so from test too: "
        "restart.wait_minutes "
        "(no restart after a preemption); tau is a lower bound (no preemption in 10 min of uptime in run "
        "r-demo-7f3a: the 95% interval's low end)"
    )


def test_node_status_is_the_operators_reading_of_the_record(built: Built) -> None:
    from spoteval.node_status import node_status

    statuses = {st.node: (st.status, st.reason) for st in report.node_statuses(built.report)}
    # A stopped itself when its share was done (the run is not: two episodes have no result), B was
    # stopped by a rule, C by a measurement
    assert statuses == {
        A: ("stopped", "done"),
        B: ("stopped_by_rule", "stop_rule:moon"),
        C: ("stopped", "measurement"),
    }
    events = built.report.record.events
    assert node_status(B, events, run_done=False).status == statuses[B][0]
    text = report.render(built.report, width=200)
    assert f"{B} stopped by a rule (stop_rule:moon)" in text
    shared = report.report_json(built.report, shared=True)
    assert [n["status"] for n in shared["nodes"]] == ["stopped", "stopped_by_rule", "stopped"]
    assert all(n["node"] not in (A, B, C) for n in shared["nodes"])
