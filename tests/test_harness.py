"""The user's eval harness on spot: inspect-ai and lm-eval shards against the stand-in model server.

Each shard runs through the shard runner (`python -m spoteval.harness run`, in this process or as a
child process for the preemptions), with the run record in a real store (a folder, or moto's S3).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval.harness import HarnessError, get
from spoteval.harness.ids import SampleIdError, sample_id, sample_key, sample_keys
from spoteval.harness.progress import ShardKeys
from spoteval.harness.runner import run
from spoteval.harness.shards import HarnessBlock, choose_episode_size, episode_command, plan, shard
from spoteval.harness.timing import Timing
from spoteval.store import Store
from tests import fake_model
from tests.conftest import StoreTarget
from tests.servers import REPO

INSPECT_TASK = "spoteval/harness/tasks/inspect_tiny.py@spoteval_tiny"
LM_OPTIONS = {"include_path": "spoteval/harness/tasks/lm_eval", "max_retries": 1}
INSPECT_IDS = [
    "arith/1",
    "colour 1",
    "geo/1",
    "bio/1",
    "astro/1",
    "phys/1",
    "words/1",
    "colour 2",
    "arith/2",
    "words 2",
]
#: the stand-in answers rows 0, 1, 3, 5, 6 and 8 of the shipped tasks as their targets say
RIGHT = {0, 1, 3, 5, 6, 8}
INSPECT_SCORES = {sid: (1.0 if i in RIGHT else 0.0) for i, sid in enumerate(INSPECT_IDS)}
LM_SCORES = {i: (1.0 if i in RIGHT else 0.0) for i in range(10)}


@pytest.fixture(scope="module")
def model() -> Iterator[fake_model.FaultyServer]:
    with fake_model.running() as server:
        yield server


def _env(
    target: StoreTarget, work: Path, node: str = "node-a", params: dict[str, Any] | None = None
) -> dict[str, str]:
    env = {
        "SPOTEVAL_WORK_DIR": str(work / node),
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(REPO),
        "SPOTEVAL_RUN_ID": "run-1",
        "SPOTEVAL_STORE": target.url,
        "SPOTEVAL_STORE_OPTIONS": json.dumps(target.options),
        "SPOTEVAL_NODE": node,
    }
    if params is not None:
        env["SPOTEVAL_EPISODE_PARAMS"] = json.dumps(params)
    return env


def _argv(harness: str, task: str, url: str, output: Path, episode: str, **extra: Any) -> list[str]:
    block = HarnessBlock(
        harness, task, "standin", options=extra.pop("options", {}), args=extra.pop("args", {})
    )
    argv = episode_command(block)[4:]  # without `python -m spoteval.harness run`
    values = {"{model_url}": url, "{output}": str(output), "{episode_id}": episode}
    argv = [values.get(a, a) for a in argv]
    if "samples" in extra:
        argv += ["--samples", json.dumps(extra.pop("samples"))]
    assert not extra
    return argv


def _result(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _scores(result: dict[str, Any], metric: str) -> dict[Any, float]:
    return {s["id"]: s["scores"][metric] for s in result["samples"]}


def _stored(target: StoreTarget, episode: str) -> list[str]:
    store = Store(target.url, target.options)
    return store.list(ShardKeys("run-1", episode).samples_prefix)


# --- ids and shards ---------------------------------------------------------------------------


def test_sample_ids_map_to_keys_and_back() -> None:
    cases: list[tuple[int | str, str]] = [
        (7, "7"),
        ("arith/1", "arith=2F1"),
        ("colour 1", "colour=201"),
        ("x=1", "x=3D1"),
        ("a..b", "a.=2Eb"),
        ("_x", "0===5Fx"),
        ("é", "0===C3=A9"),
    ]
    for sid, key in cases:
        assert sample_key(sid) == key
        assert sample_id(key, integer=isinstance(sid, int)) == sid


def test_sample_ids_that_would_meet_are_refused_with_one_line() -> None:
    with pytest.raises(SampleIdError, match=r"^sample ids 7 and '7' map to the same key '7': rename one"):
        sample_keys([7, "7"])
    with pytest.raises(SampleIdError, match=r"^sample id 'a' appears twice$"):
        sample_keys(["a", "b", "a"])
    with pytest.raises(SampleIdError, match=r"^sample id -1 must not be negative$"):
        sample_keys([-1])


def test_episode_size_comes_from_startup_and_sample_time() -> None:
    # 10 % start-up: ceil(3 * 0.9 / (0.1 * 1.5)) = 18 samples per shard
    assert choose_episode_size(Timing(3.0, 1.5), 1000) == 18
    # four shards at once over 40 samples: at most 10 each
    assert choose_episode_size(Timing(3.0, 1.5), 40, parallel=4) == 10
    # a long sample: one per shard, at most 1800 s of model work
    assert choose_episode_size(Timing(3.0, 100.0), 50) == 1
    assert choose_episode_size(Timing(60.0, 10.0), 1000) == 54
    assert choose_episode_size(Timing(600.0, 10.0), 1000) == 180


def test_shards_name_their_samples_in_order() -> None:
    block = HarnessBlock("inspect", INSPECT_TASK, "standin")
    entries = shard(block, INSPECT_IDS, 4)
    assert [e.id for e in entries] == ["spoteval_tiny-0001", "spoteval_tiny-0002", "spoteval_tiny-0003"]
    assert [e.params["samples"] for e in entries] == [INSPECT_IDS[:4], INSPECT_IDS[4:8], INSPECT_IDS[8:]]
    assert entries[0].params["harness"] == "inspect"
    with pytest.raises(SampleIdError):
        shard(block, [1, "1"], 4)


def test_episode_command_points_at_the_model_server_root() -> None:
    block = HarnessBlock("lm-eval", "spoteval_tiny", "m", options={"include_path": "x"})
    assert episode_command(block, "py") == [
        "py", "-m", "spoteval.harness", "run", "--harness", "lm-eval", "--task", "spoteval_tiny",
        "--model", "m", "--model-url", "{model_url}", "--output", "{output}", "--episode", "{episode_id}",
        "--options", '{"include_path": "x"}',
    ]  # fmt: skip


def test_unknown_harness_is_one_line() -> None:
    with pytest.raises(HarnessError, match=r"^unknown harness 'helm' \(known: inspect, lm-eval\)$"):
        get("helm")


# --- completed shards -------------------------------------------------------------------------


def test_inspect_shard_completes_with_exact_scores(
    model: fake_model.FaultyServer, file_target: StoreTarget, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    params = {"samples": INSPECT_IDS}
    code = run(
        _argv("inspect", INSPECT_TASK, model.base_url, out, "tiny-1"),
        _env(file_target, tmp_path, params=params),
    )
    assert code == 0
    result = _result(out)
    assert _scores(result, "exact") == INSPECT_SCORES
    assert [s["key"] for s in result["samples"]] == sample_keys(INSPECT_IDS)
    assert (result["from_store"], result["ran"], result["harness"]) == (0, 10, "inspect")
    assert len(_stored(file_target, "tiny-1")) == 10
    assert len(result["logs"]) == 1 and result["logs"][0].endswith(".eval")
    assert result["logs"][0].startswith("runs/run-1/harness/tiny-1/logs/")


def test_lm_eval_shard_completes_with_exact_scores(
    model: fake_model.FaultyServer, file_target: StoreTarget, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    argv = _argv("lm-eval", "spoteval_tiny", model.base_url, out, "lm-1", options=LM_OPTIONS)
    assert run(argv, _env(file_target, tmp_path)) == 0  # no samples named: every document of the task
    result = _result(out)
    assert _scores(result, "exact_match") == LM_SCORES
    assert (result["from_store"], result["ran"], result["harness"]) == (0, 10, "lm-eval")
    assert len(_stored(file_target, "lm-1")) == 10
    assert sorted(k.rsplit("/", 1)[1] for k in result["logs"]) == [
        "results.json",
        "samples_spoteval_tiny.jsonl",
    ]


# --- preemption mid-shard, resumed on another node from the store ------------------------------


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "spoteval.harness", "run", *argv],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_stored(target: StoreTarget, episode: str, n: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while len(_stored(target, episode)) < n:
        assert proc.poll() is None, (proc.returncode, proc.stderr.read() if proc.stderr else b"")
        assert time.monotonic() < deadline, "the shard never finished its first samples"
        time.sleep(0.2)


@pytest.mark.slow
def test_inspect_shard_killed_mid_way_resumes_on_another_node(
    s3_target: StoreTarget, model: fake_model.FaultyServer, tmp_path: Path
) -> None:
    with fake_model.running(gate=4) as gated:
        argv = _argv(
            "inspect", INSPECT_TASK, gated.base_url, tmp_path / "a.json", "tiny-1", samples=INSPECT_IDS
        )
        env = _env(s3_target, tmp_path, "node-a")
        proc = _spawn(argv, env)
        _wait_stored(s3_target, "tiny-1", 4, proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the node is gone: no log upload, nothing more
        proc.wait(timeout=30)
    assert len(_stored(s3_target, "tiny-1")) == 4
    assert not (tmp_path / "a.json").exists()

    out = tmp_path / "b.json"
    argv = _argv("inspect", INSPECT_TASK, model.base_url, out, "tiny-1", samples=INSPECT_IDS)
    env = _env(s3_target, tmp_path, "node-b")
    done = subprocess.run(
        [sys.executable, "-m", "spoteval.harness", "run", *argv], env=env, cwd=REPO, check=False
    )
    assert done.returncode == 0
    result = _result(out)
    assert (result["from_store"], result["ran"]) == (4, 6)
    assert _scores(result, "exact") == INSPECT_SCORES  # the same as an uninterrupted shard
    assert len(_stored(s3_target, "tiny-1")) == 10
    assert all("-node-b/" in key for key in result["logs"])


@pytest.mark.slow
def test_lm_eval_shard_terminated_mid_way_resumes_on_another_node(
    file_target: StoreTarget, model: fake_model.FaultyServer, tmp_path: Path
) -> None:
    with fake_model.running(gate=3) as gated:
        argv = _argv(
            "lm-eval", "spoteval_tiny", gated.base_url, tmp_path / "a.json", "lm-1", options=LM_OPTIONS
        )
        proc = _spawn(argv, _env(file_target, tmp_path, "node-a", params={"samples": list(range(10))}))
        _wait_stored(file_target, "lm-1", 3, proc)
        proc.send_signal(signal.SIGTERM)  # a notice: the runner leaves, and dies by the signal
        assert proc.wait(timeout=60) == -signal.SIGTERM
    assert len(_stored(file_target, "lm-1")) == 3

    out = tmp_path / "b.json"
    argv = _argv("lm-eval", "spoteval_tiny", model.base_url, out, "lm-1", options=LM_OPTIONS)
    assert run(argv, _env(file_target, tmp_path, "node-b", params={"samples": list(range(10))})) == 0
    result = _result(out)
    assert (result["from_store"], result["ran"]) == (3, 7)
    assert _scores(result, "exact_match") == LM_SCORES


# --- failures: the model's, and the harness's ---------------------------------------------------


def test_a_failing_model_server_is_a_model_failure(
    file_target: StoreTarget, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_model.running(fail=True) as failing:
        inspect_argv = _argv(
            "inspect", INSPECT_TASK, failing.base_url, tmp_path / "i.json", "tiny-1",
            options={"max_retries": 1, "timeout": 20}, samples=INSPECT_IDS[:2],
        )  # fmt: skip
        assert run(inspect_argv, _env(file_target, tmp_path)) == 1
        lm_argv = _argv(
            "lm-eval", "spoteval_tiny", failing.base_url, tmp_path / "l.json", "lm-1", options=LM_OPTIONS
        )
        assert run(lm_argv, _env(file_target, tmp_path, params={"samples": [0, 1]})) == 1
    failures = re.findall(r"^model_failure: .*$", capsys.readouterr().err, re.MULTILINE)
    assert len(failures) == 2
    assert failures[0].startswith("model_failure: sample ") and "500 - the model crashed" in failures[0]
    assert failures[1].startswith("model_failure: model call failed: document 0: ")
    assert not (tmp_path / "i.json").exists() and not (tmp_path / "l.json").exists()
    assert _stored(file_target, "tiny-1") == [] and _stored(file_target, "lm-1") == []


@pytest.mark.parametrize(
    ("harness", "task", "extra", "message"),
    [
        (
            "inspect",
            INSPECT_TASK,
            {"samples": ["arith/1", "nope/9"]},
            "harness_error: inspect finished without sample 'nope/9'",
        ),
        (
            "inspect",
            INSPECT_TASK,
            {"samples": ["nope/9"]},
            "harness_error: inspect: PrerequisiteError: No matches",
        ),
        (
            "inspect",
            "spoteval/harness/tasks/inspect_tiny.py@nope",
            {},
            "harness_error: inspect: PrerequisiteError",
        ),
        (
            "inspect",
            INSPECT_TASK,
            {"options": {"log_dir": "x"}},
            "harness_error: inspect option 'log_dir' is set",
        ),
        (
            "inspect",
            INSPECT_TASK,
            {"options": {"epochz": 2}},
            "harness_error: inspect has no eval() option 'epochz'",
        ),
        ("lm-eval", "nope", {"options": LM_OPTIONS}, "harness_error: lm-eval task 'nope' does not exist"),
        (
            "lm-eval",
            "spoteval_tiny",
            {"options": LM_OPTIONS, "samples": [3, 10]},
            "harness_error: lm-eval task",
        ),
        ("lm-eval", "spoteval_tiny", {}, "harness_error: lm-eval needs the option include_path"),
    ],
)
def test_harness_errors_are_not_the_models(
    harness: str,
    task: str,
    extra: dict[str, Any],
    message: str,
    model: fake_model.FaultyServer,
    file_target: StoreTarget,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out.json"
    extra.setdefault("samples", [0] if harness == "lm-eval" else ["arith/1"])
    assert run(_argv(harness, task, model.base_url, out, "ep-1", **extra), _env(file_target, tmp_path)) == 3
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(message)
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv_extra", "env_extra", "message"),
    [
        (["--harness", "helm"], {}, "harness: unknown harness 'helm' (known: inspect, lm-eval)"),
        (
            ["--samples", '[7, "7"]'],
            {},
            "harness: sample ids 7 and '7' map to the same key '7': rename one of them",
        ),
        (["--samples", "[true]"], {}, "harness: sample id True must be a string or an integer"),
        (
            [],
            {"SPOTEVAL_EPISODE_PARAMS": '{"samples": "a"}'},
            "harness: SPOTEVAL_EPISODE_PARAMS: samples must be a list",
        ),
        ([], {"SPOTEVAL_STORE": ""}, "harness: no store or run id: give --store and --run-id"),
    ],
)
def test_bad_input_is_one_line_and_runs_nothing(
    argv_extra: list[str],
    env_extra: dict[str, str],
    message: str,
    file_target: StoreTarget,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _argv("inspect", INSPECT_TASK, "http://127.0.0.1:9", tmp_path / "o.json", "ep-1") + argv_extra
    assert run(argv, _env(file_target, tmp_path) | env_extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)
    assert _stored(file_target, "ep-1") == []


def test_shard_plan_states_its_size_and_why() -> None:
    block = HarnessBlock("inspect", INSPECT_TASK, "standin", sample_s=1.4)
    measured = Timing(14.8, 0.44, source="harness benchmark (inspect_ai 0.3.285, 2026-12-01)")
    chosen = plan(block, INSPECT_IDS * 1 + [f"x{i}" for i in range(90)], parallel=4, timing=measured)
    assert (chosen.size, len(chosen.entries), chosen.chosen) == (25, 4, True)
    assert chosen.describe() == (
        "100 samples in 4 shards of up to 25, chosen from start-up 14.8 s per shard and 1.4 s per sample "
        "(start-up <= 10% of a shard; figures: time per sample as given, the rest harness benchmark "
        "(inspect_ai 0.3.285, 2026-12-01))"
    )
    given = plan(HarnessBlock("lm-eval", "t", "m", episode_size=3), list(range(10)))
    assert (given.size, [len(e.params["samples"]) for e in given.entries]) == (3, [3, 3, 3, 1])
    assert given.describe() == "10 samples in 4 shards of up to 3, as given (shard_size)"


@pytest.mark.slow
def test_a_shard_runs_from_the_bundle_as_built_unpacked_into_an_empty_folder(
    model: fake_model.FaultyServer, file_target: StoreTarget, tmp_path: Path
) -> None:
    from spoteval.bundle.build import build_bundle
    from spoteval.bundle.project import ProjectSpec
    from spoteval.bundle.unpack import unpack

    tasks = REPO / "spoteval" / "harness" / "tasks"
    bundle = build_bundle(project=ProjectSpec(tasks))
    for name in ("inspect_tiny.py", "inspect_tiny.jsonl", "lm_eval/tiny.yaml", "lm_eval/tiny.jsonl"):
        assert f"eval/{name}" in bundle.files
    archive = tmp_path / "agent-bundle.zip"
    archive.write_bytes(bundle.data)
    root = unpack(archive, tmp_path / "empty" / "bundle")
    out = tmp_path / "out.json"
    task = "eval/inspect_tiny.py@spoteval_tiny"
    argv = _argv("inspect", task, model.base_url, out, "tiny-1", samples=INSPECT_IDS[:3])
    env = _env(file_target, tmp_path) | {"PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "spoteval.harness", "run", *argv], env=env, cwd=root, check=False
    )
    assert done.returncode == 0
    assert _scores(_result(out), "exact") == {sid: INSPECT_SCORES[sid] for sid in INSPECT_IDS[:3]}
