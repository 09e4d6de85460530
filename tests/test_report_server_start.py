"""The report shows the model server's start-up by phase, per start, from the `ready` events'
`server_phases` (what the agent read from vLLM's log): a row each, the median, what the caches did;
bad numbers are left out, and a start without phases has no row."""

from __future__ import annotations

from spoteval import report
from spoteval.record import Event
from spoteval.report.server_start import headers, rows
from tests.test_report import A, at, ev

FIRST = {"imports": 14.0, "model_inspection": 16.0, "engine_start": 22.0, "weight_load": 0.02,
         "compile_warmup": 35.0, "api_start": 2.0, "ready": 0.5}  # fmt: skip
SECOND = {**FIRST, "model_inspection": 0.4, "compile_warmup": 30.0}


def events() -> list[Event]:
    return [
        ev(0, A, "start", "initial", 1.0, heartbeat_s=30),
        ev(90, A, "ready", None, 1.0, server_phases=FIRST, server_log={"compile_cache": "compiled"}),
        ev(300, A, "preempted", "provider"),
        ev(400, A, "start", "restart_after_preemption", 1.0, heartbeat_s=30),
        ev(470, A, "ready", None, 1.0, server_phases={**SECOND, "weird": "x", "inf": float("inf")}),
        ev(600, A, "stop", "done", 1.0),
        ev(700, A, "start", "restart_after_stop", 1.0, heartbeat_s=30),
        ev(710, A, "ready", None, 1.0, agent_to_server_healthy_s=3.0),  # a server without phases
        ev(800, A, "stop", "done", 1.0),
    ]


def test_each_start_shows_its_server_phases_and_the_median() -> None:
    allocs, _, _ = report.allocations(events(), now=at(900))
    assert [dict(a.server_phases) for a in allocs] == [FIRST, SECOND, {}]
    assert allocs[0].server_log == {"compile_cache": "compiled"}
    assert headers(allocs) == ["node", "#", "imports", "inspect", "engine", "weights", "compile+warm", "api",
                               "ready", "total", "compile cache"]  # fmt: skip
    table = rows(allocs, {}, shared=False)
    assert table == [
        [A, "1", "14.0 s", "16.0 s", "22.0 s", "0.0 s", "35.0 s", "2.0 s", "0.5 s", "89.5 s", "compiled"],
        [A, "2", "14.0 s", "0.4 s", "22.0 s", "0.0 s", "30.0 s", "2.0 s", "0.5 s", "68.9 s", "-"],
        ["median", "", "14.0 s", "8.2 s", "22.0 s", "0.0 s", "32.5 s", "2.0 s", "0.5 s", "79.2 s", ""],
    ]
    # the S table has the phases too (their medians), not the server's own repeated durations
    assert "server_phases.imports" in allocs[0].phases and not any(
        "server_log" in k for k in allocs[0].phases
    )
    assert rows(allocs, {A: "node-1"}, shared=True)[0][0] == "node-1"
