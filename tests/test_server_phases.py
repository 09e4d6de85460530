"""The model server's start-up phases from vLLM 0.32's own log lines (tests/data/vllm-0.32-start.log,
copied from a real start on this machine), the log follower on a growing file, and the report's
per-start table."""

from __future__ import annotations

import time
from pathlib import Path

from spoteval.agent import server_phases as sp

LOG = Path(__file__).parent / "data" / "vllm-0.32-start.log"


def fed(lines: list[str]) -> sp.LogMarks:
    marks = sp.LogMarks()
    for i, line in enumerate(lines):
        marks.feed(line, float(10 + i))  # line i seen at 10 + i seconds
    return marks


def test_every_phase_of_a_vllm_start_is_read_from_its_lines() -> None:
    lines = LOG.read_text(encoding="utf-8").splitlines()
    marks = fed(lines)
    # spawn at 5 s, healthy at 30 s; line i was seen at 10 + i s
    assert sp.phases(marks, 5.0, 30.0) == {
        "imports": 5.0,  # spawn -> the banner (line 0)
        "model_inspection": 3.0,  # -> Resolved architecture (line 3)
        "engine_start": 3.0,  # -> Starting to load model (line 6)
        "weight_load": 2.0,  # -> Loading weights took (line 8)
        "compile_warmup": 3.0,  # -> Warming up done (line 11)
        "api_start": 2.0,  # -> Starting vLLM server on (line 13)
        "ready": 7.0,  # -> healthy at 30 s
    }
    assert marks.facts == {"compile_cache": "compiled"}
    assert marks.reported == {"weights_s": 0.04, "init_engine_s": 65.03}


def test_unknown_lines_are_ignored_and_missing_phases_are_absent() -> None:
    lines = [line for line in LOG.read_text(encoding="utf-8").splitlines() if "Loading weights" not in line]
    lines.insert(4, "some other server's line: Resolved nothing, loading something")
    marks = fed(lines)
    found = sp.phases(marks, 5.0, None)
    assert set(found) == {"imports", "model_inspection", "engine_start", "api_start"}
    assert sp.details(sp.LogMarks(), 1.0, 2.0) == {}  # a server that says nothing known: no phases
    assert sp.phases(fed(["INFO: Application startup complete."]), None, 3.0) == {}


def test_a_failed_compile_cache_load_counts_as_compiled() -> None:
    marks = fed(
        [
            "(Worker) INFO [decorators.py] [backbone] Directly load AOT compilation from path /c/model",
            "(Worker) WARNING [backends.py] Compiling model again due to a load failure from /x",
        ]
    )
    assert marks.facts == {"compile_cache": "compiled"}


def test_the_follower_times_lines_as_they_are_written(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("a line from an earlier start: Resolved architecture: Old\n")
    follower = sp.ServerLog(str(path), lambda _m: None)
    follower.start()  # from the file's size now: the earlier start's lines do not count
    before = time.monotonic()
    with path.open("a", encoding="utf-8") as f:
        f.write("(APIServer) INFO [api_utils.py:286] non-default args: {}\n(APIServer) INFO Resolved arch")
        f.flush()
        marks = follower.marks()
        assert set(marks.seen) == {"first_line"}  # the half-written line waits for its end
        f.write("itecture: LlamaForCausalLM\n")
    marks = follower.marks()
    follower.stop()
    assert set(marks.seen) == {"first_line", "architecture"}
    assert all(t >= before for t in marks.seen.values())
