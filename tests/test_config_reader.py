"""The typed reader: each read names the full key path of a bad value; documents read as JSON or YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from spoteval.config_reader import DocumentError, Reader, ReadError, key_path, read_document


def fails(call: Any, message: str) -> None:
    with pytest.raises(ReadError) as info:
        call()
    assert str(info.value) == message


def test_key_path_is_dotted_and_bare_at_the_top() -> None:
    assert key_path("workload.restart", "boot_minutes") == "workload.restart.boot_minutes"
    assert key_path("", "episodes") == "episodes"


def test_a_mapping_is_required_and_named() -> None:
    fails(lambda: Reader([1, 2], "workload"), "workload: must be a mapping, got list")
    fails(lambda: Reader(None, label="config"), "config: must be a mapping, got NoneType")


def test_unknown_keys_are_refused_up_front_with_the_known_ones() -> None:
    fails(
        lambda: Reader({"budgte": 5, "zz": 1}, "grant", known={"budget", "currency"}),
        "grant.budgte: unknown key (known: budget, currency)",
    )


def test_done_refuses_the_keys_no_read_asked_for() -> None:
    reader = Reader({"heartbeat_s": 5, "hearbeat": 3})
    assert reader.number("heartbeat_s") == 5.0
    fails(reader.done, "hearbeat: unknown key (known: heartbeat_s)")
    reader.value("hearbeat")
    reader.done()


def test_sections_extend_the_path_and_keep_the_error_type() -> None:
    class Problem(Exception):
        def __init__(self, key: str, problem: str) -> None:
            super().__init__(key, problem)

    top = Reader({"restart": {"boot_minutes": -1}}, "spot-eval:workload", error=Problem)
    restart = top.section("restart", known={"boot_minutes", "wait_minutes"})
    assert restart.where == "spot-eval:workload.restart"
    with pytest.raises(Problem) as info:
        restart.number("boot_minutes")
    assert info.value.args == ("spot-eval:workload.restart.boot_minutes", "must be >= 0, got -1")
    with pytest.raises(Problem) as info:
        top.section("prices")
    assert info.value.args == ("spot-eval:workload.prices", "missing (required)")
    assert top.opt_section("prices") is None


def test_numbers() -> None:
    reader = Reader({"a": 2, "b": 0, "c": -1, "d": True, "e": float("inf"), "f": "1", "g": None}, "w")
    assert reader.number("a") == 2.0 and isinstance(reader.number("a"), float)
    assert reader.number("b") == 0.0
    fails(lambda: reader.number("b", positive=True), "w.b: must be > 0, got 0")
    fails(lambda: reader.number("c"), "w.c: must be >= 0, got -1")
    fails(lambda: reader.number("a", minimum=2.5), "w.a: must be >= 2.5, got 2")
    fails(lambda: reader.number("d"), "w.d: must be a number, got True")
    fails(lambda: reader.number("e"), "w.e: must be a number, got inf")
    fails(lambda: reader.number("f"), "w.f: must be a number, got '1'")
    fails(lambda: reader.number("g"), "w.g: missing (required)")
    assert reader.number("g", 0.9) == 0.9
    assert reader.opt_number("g") is None
    assert reader.opt_number("missing") is None


def test_integers() -> None:
    reader = Reader({"n": 3, "zero": 0, "half": 2.5, "whole": 4.0, "flag": False})
    assert reader.integer("n") == 3
    assert reader.integer("absent", 7) == 7
    assert reader.integer("zero", minimum=0) == 0
    fails(lambda: reader.integer("zero"), "zero: must be >= 1, got 0")
    fails(lambda: reader.integer("zero", minimum=0, positive=True), "zero: must be > 0, got 0")
    fails(lambda: reader.integer("half"), "half: must be an integer, got 2.5")
    fails(lambda: reader.integer("whole"), "whole: must be an integer, got 4.0")
    assert reader.integer("whole", whole_floats=True) == 4
    fails(lambda: reader.integer("flag"), "flag: must be an integer, got False")
    fails(lambda: reader.integer("absent"), "absent: missing (required)")


def test_strings_choices_and_booleans() -> None:
    reader = Reader({"s": "x", "blank": "  ", "n": 1, "m": "spot", "b": "yes", "t": True}, "node")
    assert reader.string("s") == "x"
    assert reader.string("absent", "dflt") == "dflt"
    assert reader.opt_string("absent") is None
    assert reader.opt_string("s") == "x"
    fails(lambda: reader.string("blank"), "node.blank: must be a non-empty string, got '  '")
    fails(lambda: reader.string("n"), "node.n: must be a non-empty string, got 1")
    fails(lambda: reader.string("absent"), "node.absent: missing (required)")
    assert reader.choice("m", ("spot", "on_demand")) == "spot"
    assert reader.choice("absent", ("spot", "on_demand"), "on_demand") == "on_demand"
    fails(
        lambda: reader.choice("s", ("spot", "on_demand")), "node.s: must be one of spot, on_demand, got 'x'"
    )
    assert reader.boolean("t", False) is True
    assert reader.boolean("absent", True) is True
    fails(lambda: reader.boolean("b", False), "node.b: must be true or false, got 'yes'")


def test_lists_and_maps_of_strings() -> None:
    reader = Reader(
        {
            "cmd": ["vllm", "serve"],
            "empty": [],
            "one": "us-east-1",
            "bad": ["a", ""],
            "m": {"k": "v"},
            "mb": {"k": 1},
        }
    )
    assert reader.argv("cmd") == ("vllm", "serve")
    fails(lambda: reader.argv("empty"), "empty: must be a non-empty list of strings (argv), got []")
    fails(lambda: reader.argv("absent"), "absent: missing (required)")
    assert reader.argv("absent", required=False) == ()
    assert reader.strings("absent") == ()
    assert reader.strings("one", single=True) == ("us-east-1",)
    fails(lambda: reader.strings("one"), "one: must be a list of strings, got 'us-east-1'")
    fails(lambda: reader.strings("bad", what="names"), "bad: must be a list of names, got ['a', '']")
    assert reader.string_map("m") == {"k": "v"}
    assert reader.string_map("absent") == {}
    fails(lambda: reader.string_map("mb"), "mb: must be a mapping of strings, got {'k': 1}")


def test_a_kit_keeps_its_own_wording_by_overriding_the_class_attributes() -> None:
    class AgentReader(Reader):
        INTEGER_BELOW: ClassVar[str] = "must be an integer >= {minimum}, got {value!r}"

        def missing(self, key: str) -> Any:
            raise ReadError(self.path(key), "missing key")

    reader = AgentReader({"episodes": {"concurrency": 0}})
    episodes = reader.section("episodes")
    assert isinstance(episodes, AgentReader)
    fails(lambda: episodes.integer("concurrency"), "episodes.concurrency: must be an integer >= 1, got 0")
    fails(lambda: reader.section("node"), "node: missing key")


def test_documents_read_as_yaml_or_json_first(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text('{"price": 1e-05, "n": [1, 2]}\n', encoding="utf-8")
    assert read_document(path, json_first=True) == {"price": 1e-05, "n": [1, 2]}
    assert read_document(path) == {"price": "1e-05", "n": [1, 2]}  # YAML 1.1: not a number
    path.write_text("episodes: 3\nrestart: {boot_minutes: 9}\n", encoding="utf-8")
    assert read_document(path, json_first=True) == {"episodes": 3, "restart": {"boot_minutes": 9}}


def test_document_errors_say_missing_unreadable_or_malformed_and_where(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as info:
        read_document(tmp_path / "absent.yaml")
    assert (info.value.reason, info.value.detail) == ("missing", "No such file or directory")
    with pytest.raises(DocumentError) as info:
        read_document(tmp_path)
    assert info.value.reason == "unreadable"
    bad = tmp_path / "bad.yaml"
    bad.write_text("episodes: [1, 2\nconcurrency: 3\n", encoding="utf-8")
    with pytest.raises(DocumentError) as info:
        read_document(bad, json_first=True)
    err = info.value
    assert (err.reason, err.detail, err.at) == (
        "malformed",
        "expected ',' or ']', but got ':'",
        " at line 2 column 12",
    )
    assert err.first_line == "while parsing a flow sequence"
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(DocumentError) as info:
        read_document(latin)
    assert info.value.reason == "unreadable"
