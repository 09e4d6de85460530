from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from spoteval import manifest, record, redaction
from spoteval.record import Attempt, Event, RecordError, RunLayout

T0 = datetime(2026, 11, 30, 4, 54, 0, 123456, tzinfo=timezone.utc)


def event(kind: str = "start", reason: str | None = "initial", **kw: object) -> Event:
    fields: dict[str, object] = {
        "time": T0,
        "run_id": "run-1",
        "node": "i-0abc",
        "kind": kind,
        "reason": reason,
        "provider": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "g6.xlarge",
        "market": "spot",
        "price_per_hour": 0.42,
        "currency": "USD",
        "price_source": "api",
    }
    fields.update(kw)
    return Event(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [(k, r) for k, reasons in sorted(record.REASONS.items()) for r in sorted(reasons, key=str)],
)
def test_every_kind_and_reason_of_the_design_round_trips(kind: str, reason: str | None) -> None:
    ev = event(kind, reason, details={"phase_s": {"boot": 1.5}})
    back, problems = Event.loads(ev.dumps())
    assert problems == []
    assert back == ev


def test_closed_lists_match_the_design() -> None:
    assert record.EVENT_KINDS == {"start", "ready", "notice", "preempted", "stop", "heartbeat"}
    assert record.REASONS["notice"] == {
        "spot_interruption",
        "rebalance_recommendation",
        "preempted",
        "scheduled_event",
        "sigterm",
    }
    assert record.REASONS["stop"] == {
        "done",
        "stop_rule:max_runtime",
        "stop_rule:idle",
        "stop_rule:budget",
        "stop_rule:price_cap",
        "measurement",
        "user",
        "provider",
    }
    assert record.ATTEMPT_OUTCOMES == {"completed", "model_failure", "harness_error", "interrupted"}
    assert record.RESULT_OUTCOMES == {"completed", "model_failure", "harness_error"}


def test_event_json_carries_every_design_field() -> None:
    obj = json.loads(event().dumps())
    assert set(obj) == set(record.EVENT_FIELDS)
    assert obj["time"] == "2026-11-30T04:54:00.123456Z"
    assert obj["details"] == {}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kind": "exploded"}, "unknown event kind 'exploded'"),
        ({"kind": "stop", "reason": "bored"}, "unknown reason 'bored' for 'stop'"),
        ({"kind": "ready", "reason": "initial"}, "takes no reason"),
        ({"market": "reserved"}, "unknown market 'reserved'"),
        ({"price_source": "guess"}, "unknown price_source 'guess'"),
        ({"price_per_hour": -1.0}, "negative"),
        ({"node": ""}, "node must be"),
    ],
)
def test_writing_an_event_outside_the_closed_lists_is_an_error(kw: dict[str, object], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        event(**kw).dumps()  # type: ignore[arg-type]


def test_reading_an_unknown_kind_keeps_the_object_and_reports_it() -> None:
    obj = json.loads(event().dumps())
    obj["kind"] = "hibernate"
    obj["reason"] = "provider_whim"
    obj["future_field"] = {"x": 1}
    ev, problems = Event.from_json(obj)
    assert ev.kind == "hibernate"
    assert ev.reason == "provider_whim"
    assert ev.extra == {"future_field": {"x": 1}}
    assert any("unknown event kind 'hibernate'" in p for p in problems)


def test_reading_wrong_types_reports_instead_of_crashing() -> None:
    obj = json.loads(event().dumps())
    obj["price_per_hour"] = "cheap"
    obj["details"] = [1, 2]
    obj["zone"] = 7
    ev, problems = Event.from_json(obj)
    assert ev.price_per_hour is None
    assert ev.details == {"value": [1, 2]}
    assert len(problems) == 3


@pytest.mark.parametrize("data", [b"not json", b"[1, 2]", b'{"kind": "start"}', b'{"time": "yesterday"}'])
def test_malformed_event_objects_raise_record_error_only(data: bytes) -> None:
    with pytest.raises(RecordError):
        Event.loads(data)


def attempt(outcome: str = "completed", **kw: object) -> Attempt:
    fields: dict[str, object] = {
        "episode_id": "ep-0001",
        "outcome": outcome,
        "attempt": 1,
        "node": "i-0abc",
        "started": T0,
        "ended": T0 + timedelta(seconds=42),
        "output": {"score": 1.0} if outcome == "completed" else None,
    }
    fields.update(kw)
    return Attempt(**fields)  # type: ignore[arg-type]


def test_attempt_round_trip_and_duration() -> None:
    a = attempt()
    back, problems = Attempt.loads(a.dumps())
    assert problems == []
    assert back == a
    assert back.seconds == 42


def test_a_result_is_never_interrupted() -> None:
    interrupted = attempt("interrupted")
    interrupted.dumps()  # fine as an attempt
    with pytest.raises(RecordError, match="unknown result outcome 'interrupted'"):
        interrupted.dumps(as_result=True)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"outcome": "crashed"}, "unknown attempt outcome"),
        ({"attempt": 0}, "attempt 0 must be"),
        ({"ended": T0 - timedelta(seconds=1)}, "ended is before started"),
        ({"episode_id": "../x"}, "episode_id"),
        ({"output": None}, "carries the episode's output"),
    ],
)
def test_bad_attempts_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        attempt(**kw).dumps()  # type: ignore[arg-type]


def test_layout_matches_the_design() -> None:
    layout = RunLayout("run-1")
    assert layout.manifest == "runs/run-1/manifest.jsonl"
    assert layout.result("ep-1") == "runs/run-1/results/ep-1.json"
    assert layout.attempt("ep-1", 3) == "runs/run-1/attempts/ep-1/3.json"
    key = layout.event(T0, "i-0abc", 7)
    assert key == "runs/run-1/events/20261130T045400.123456Z-i-0abc-000007.json"
    assert layout.episode_of_result(layout.result("ep-1")) == "ep-1"
    assert layout.attempt_of_key(layout.attempt("ep-1", 3)) == ("ep-1", 3)
    assert layout.attempt_of_key("runs/run-1/attempts/ep-1/x.json") is None


def test_event_names_sort_by_time() -> None:
    layout = RunLayout("r")
    keys = [layout.event(T0 + timedelta(seconds=s), "node/with:odd chars", 0) for s in (10, 1, 100, 2)]
    times = [k.split("/")[-1] for k in sorted(keys)]
    assert times == sorted(times)
    assert all("/" not in k.split("events/")[1] for k in keys)


@pytest.mark.parametrize("bad", ["", "../etc", "a/b", "-leading", "x" * 300])
def test_unsafe_ids_are_refused(bad: str) -> None:
    with pytest.raises(RecordError):
        RunLayout(bad)


def test_manifest_parse_rejects_duplicates_and_names_the_line() -> None:
    entries = manifest.parse_manifest('{"id": "a", "x": 1}\n\n{"id": "b"}\n')
    assert [e.id for e in entries] == ["a", "b"]
    assert entries[0].params == {"x": 1}
    assert manifest.parse_manifest(manifest.dump_manifest(entries).decode()) == entries
    with pytest.raises(RecordError, match="line 2: id 'a' appears twice"):
        manifest.parse_manifest('{"id": "a"}\n{"id": "a"}\n')
    with pytest.raises(RecordError, match="line 1: not JSON"):
        manifest.parse_manifest("{nope\n")
    with pytest.raises(RecordError, match="no episodes"):
        manifest.parse_manifest("\n")


def test_shared_view_of_an_event_carries_no_private_identifier() -> None:
    ev = event(
        "notice",
        "spot_interruption",
        details={"instance_id": "i-0abc", "public_ip": "203.0.113.9", "deadline_s": 120},
    )
    private = redaction.private_identifiers(ev)
    assert {"run-1", "i-0abc", "us-east-1a", "203.0.113.9"} <= private
    shared = json.dumps(redaction.redact_event(ev))
    for identifier in private:
        assert identifier not in shared
    assert "0.42" not in shared
    assert "deadline_s" in shared


def test_time_helpers_reject_naive_times() -> None:
    with pytest.raises(RecordError):
        record.format_time(datetime(2026, 1, 1))
    with pytest.raises(RecordError):
        record.parse_time("2026-01-01T00:00:00")
    assert record.parse_time("2026-01-01T01:00:00+01:00") == datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "micro"),
    [
        ("2026-01-01T00:00:00.12Z", 120000),
        ("2026-01-01T00:00:00.1234567Z", 123456),
        ("2026-01-01T00:00:00Z", 0),
    ],
)
def test_any_number_of_fraction_digits_is_read(text: str, micro: int) -> None:
    assert record.parse_time(text).microsecond == micro
