"""A user's own eval, kept outside the project: what ships (excludes, size, credentials), the task
named one way for both harnesses, the stack that runs it, the node's requirements venv, lm-eval's
document ids, and every bad input refused with one line and exit 2 before anything starts."""

from __future__ import annotations

import copy
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.mocks import read_stack_config
from scripts import drill as drill_cli
from scripts import plan as plan_cli
from spoteval.agent.evalenv import EvalEnvConfig, prepare
from spoteval.bundle.build import build_bundle
from spoteval.bundle.ignore import compile_lines, ignored
from spoteval.bundle.project import SIZE_LIMIT, ProjectError, ProjectSpec, collect, looks_like_credential
from spoteval.bundle.unpack import UnpackError, unpack
from spoteval.harness.runner import run
from spoteval.harness.taskref import FILE, FOLDER, MODULE, REGISTRY, TaskError, split
from spoteval.store import Store
from tests import fake_model
from tests.conftest import StoreTarget
from tests.own_eval_kit import WHEEL, build_wheel, user_folder
from tests.servers import REPO
from tests.test_stacks import STACKS, agent_template, user_data

# --- what ships --------------------------------------------------------------------------------


def test_gitignore_rules_decide_what_stays_home() -> None:
    rules = compile_lines(["*.log", "!keep.log", "/top.txt", "data/raw/", "**/cache/", "sub/*.tmp", "# x"])
    stays = {
        "a.log": True, "deep/b.log": True, "keep.log": False, "top.txt": True, "deep/top.txt": False,
        "data/raw": True, "data/rawer": False, "x/cache": True, "sub/a.tmp": True, "sub/d/a.tmp": False,
    }  # fmt: skip
    assert {p: ignored(rules, p, is_dir=p in ("data/raw", "x/cache", "data/rawer")) for p in stays} == stays


def test_credentials_are_recognised_by_name() -> None:
    for name in (
        ".env",
        "conf/.env.prod",
        "key.pem",
        "id_rsa",
        ".aws/credentials",
        "sa-service-account-1.json",
    ):
        assert looks_like_credential(name), name
    for name in (".env.example", "environment.py", "keys.py", "data/credentialsx.txt"):
        assert not looks_like_credential(name), name


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "data" / "raw").mkdir(parents=True)
    (root / "task.py").write_text("x = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "data" / "raw" / "big.bin").write_bytes(b"0" * 10)
    (root / "data" / "small.jsonl").write_text("{}\n")
    (root / "notes.log").write_text("x")
    (root / ".gitignore").write_text("*.log\ndata/raw/\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"x")
    return root


def test_the_project_ships_as_at_home_less_what_gitignore_and_excludes_keep(tmp_path: Path) -> None:
    root = _project(tmp_path)
    spec = ProjectSpec(root, excludes=("run.sh",))
    assert [f.rel for f in collect(spec)] == [".gitignore", "data/small.jsonl", "task.py"]
    bundle = build_bundle(project=ProjectSpec(root, requirements=("inspect-ai==0.3.285",)))
    assert [n for n in bundle.files if n.startswith("eval")] == [
        "eval/.gitignore", "eval/data/small.jsonl", "eval/run.sh", "eval/task.py", "eval.json",
    ]  # fmt: skip
    assert bundle.eval is not None
    assert (bundle.eval["files"], bundle.eval["requirements"]) == (4, {"lines": ["inspect-ai==0.3.285"]})
    assert (
        build_bundle(project=ProjectSpec(root, requirements=("inspect-ai==0.3.285",))).sha256 == bundle.sha256
    )
    archive = tmp_path / "b.zip"
    archive.write_bytes(bundle.data)
    target = tmp_path / "node" / "bundle"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("from another bundle")
    unpack(archive, target)
    assert not (target / "stale.txt").exists()  # a fresh folder for a new bundle
    (target / "eval" / "__pycache__").mkdir()
    unpack(archive, target)  # the same bundle again (a restart): kept, with its bytecode
    assert (target / "eval" / "__pycache__").is_dir()
    assert oct((target / "eval" / "run.sh").stat().st_mode & 0o777) == "0o755"
    assert (target / "eval" / "task.py").read_text() == "x = 1\n"


def test_a_credential_or_an_oversized_project_is_refused_in_one_line(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / ".env").write_text("TOKEN=x")
    with pytest.raises(ProjectError) as info:
        collect(ProjectSpec(root))
    assert (info.value.field, str(info.value)) == (
        "workdir",
        f"{root}/.env looks like a credential and would ship to the node: exclude it (.gitignore or "
        "eval.exclude), or list it in eval.ship_credentials if it must go",
    )
    assert ".env" in [f.rel for f in collect(ProjectSpec(root, ship_credentials=(".env",)))]
    (root / ".env").unlink()
    with open(root / "data" / "huge.bin", "wb") as f:
        f.truncate(SIZE_LIMIT + 1)  # sparse: no disk is used
    with pytest.raises(ProjectError) as info:
        collect(ProjectSpec(root))
    assert str(info.value) == (
        f"the eval project {root} holds 50.0 MB to ship, above the 50.0 MB limit (largest: data/huge.bin, "
        "50.0 MB): exclude what the node does not need (.gitignore or eval.exclude), or fetch large data "
        "on the node"
    )


def test_unpack_refuses_a_member_that_would_leave_the_folder(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(UnpackError, match=r"would leave the folder"):
        unpack(archive, tmp_path / "dest")
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "dest").exists()


def test_one_task_syntax_for_both_harnesses() -> None:
    assert split("inspect", "evals/a.py@arith") == split("inspect", "evals/a.py@arith")
    assert (split("inspect", "evals/a.py@arith").kind, split("inspect", "/abs/a.py").name) == (FILE, None)
    assert split("inspect", "my_evals.arith@arith12").module == "my_evals.arith"
    assert split("inspect", "my_evals.arith@arith12").kind == MODULE
    assert split("inspect", "inspect_evals/gsm8k").kind == REGISTRY
    lm = split("lm-eval", "tasks/lm@arith10")
    assert (lm.kind, lm.path, lm.name) == (FOLDER, "tasks/lm", "arith10")
    assert split("lm-eval", "arith10", {"include_path": "tasks/lm"}).spelled() == "tasks/lm@arith10"
    with pytest.raises(TaskError, match=r"write PATH.py@TASK \(a file\) or package.module@TASK"):
        split("inspect", "evals/a@arith")


# --- the node's requirements venv ----------------------------------------------------------------


def test_requirements_install_once_into_a_venv_kept_by_their_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing is fetched: the wheel is local
    root = tmp_path / "bundle"
    (root / "eval" / "wheels").mkdir(parents=True)
    build_wheel(root / "eval" / "wheels")
    (root / "eval" / "requirements.txt").write_text(f"./wheels/{WHEEL}\n")
    cfg = EvalEnvConfig(str(tmp_path / "cache" / "venvs"), "eval", "eval/requirements.txt")
    logs: list[str] = []
    first = prepare(cfg, logs.append, root)
    assert first.error is None, first.error
    assert first.details is not None and first.details["reused"] is False
    assert first.cwd == str(root / "eval")
    probe = os.popen(f"{first.python} -c 'import arith_helpers, obstore; print(arith_helpers.polite(\"x\"))'")
    assert probe.read().strip() == "Please. x"  # its own package, and the agent's (layered)
    again = prepare(cfg, logs.append, root)
    assert again.details is not None and again.details["reused"] is True and again.python == first.python
    assert again.details["requirements"] == first.details["requirements"]

    failing = EvalEnvConfig(str(tmp_path / "cache" / "venvs"), None, None, ("spoteval-no-such-package==1.0",))
    bad = prepare(failing, logs.append, root)
    assert bad.error is not None and bad.error.startswith("requirements install failed (")
    assert (
        bad.error.splitlines()[-1]
        == "ERROR: No matching distribution found for spoteval-no-such-package==1.0"
    )
    assert bad.details is not None and bad.details["requirements"] != first.details["requirements"]


# --- lm-eval stores documents under their index -------------------------------------------------


@pytest.mark.slow
def test_lm_eval_shards_store_document_ids_and_resume_skips_exactly_those(
    file_target: StoreTarget, tmp_path: Path
) -> None:
    task = "spoteval/harness/tasks/lm_eval@spoteval_tiny"
    store = Store(file_target.url, file_target.options)
    env = {
        "SPOTEVAL_WORK_DIR": str(tmp_path / "node"), "SPOTEVAL_RUN_ID": "run-1",
        "SPOTEVAL_STORE": file_target.url, "SPOTEVAL_STORE_OPTIONS": json.dumps(file_target.options),
        "SPOTEVAL_NODE": "node-a", "PATH": os.environ.get("PATH", ""),
    }  # fmt: skip
    right = {0, 1, 3, 5, 6, 8}  # the stand-in's answers to the shipped task
    here = os.getcwd()
    with fake_model.running() as model:
        try:
            os.chdir(REPO)
            for episode, samples in (("lm-5to9", [5, 6, 7, 8, 9]), ("lm-gaps", [9, 2, 5])):
                argv = ["--harness", "lm-eval", "--task", task, "--model", "standin",
                        "--model-url", model.base_url, "--episode", episode,
                        "--samples", json.dumps(samples)]  # fmt: skip
                assert run([*argv, "--output", str(tmp_path / f"{episode}.json")], env) == 0
                result = json.loads((tmp_path / f"{episode}.json").read_text())
                keys = sorted(k.split("/")[-2] for k in store.list(f"runs/run-1/harness/{episode}/samples/"))
                assert keys == sorted(str(s) for s in samples)
                assert {s["id"]: s["scores"]["exact_match"] for s in result["samples"]} == {
                    s: float(s in right) for s in samples
                }
                assert (result["from_store"], result["ran"]) == (0, len(samples))
                # the same shard again: every document from the store, none asked again
                assert run([*argv, "--output", str(tmp_path / "again.json")], env) == 0
                again = json.loads((tmp_path / "again.json").read_text())
                assert (again["from_store"], again["ran"]) == (len(samples), 0)
                assert again["samples"] == result["samples"]
        finally:
            os.chdir(here)


# --- bad input: one line, exit 2, nothing started ------------------------------------------------


def _bad_cases(home: Path) -> list[tuple[list[str], str, str]]:
    """(drill options, the drill's line, the stack's key and line) for each bad input."""
    big = home / "big"
    big.mkdir()
    (big / "t.py").write_text("def t():\n    pass\n")
    with open(big / "data.bin", "wb") as f:
        f.truncate(SIZE_LIMIT + 1)
    secret = home / "secret"
    secret.mkdir()
    (secret / "t.py").write_text("def t():\n    pass\n")
    (secret / ".env").write_text("KEY=1\n")
    return [
        (["--harness", "inspect", "--task", "inspect/nope.py@arith12"], "task",
         "task file inspect/nope.py does not exist"),
        (["--harness", "inspect", "--task", "inspect/arith12.py@nope"], "task",
         "inspect/arith12.py defines no task function 'nope'"),
        (["--harness", "lm-eval", "--task", "lm@nope"], "task",
         "lm-eval task 'nope' is not in lm: no YAML file there defines it"),
        (["--harness", "inspect", "--task", "../elsewhere/t.py@t"], "task",
         f"../elsewhere/t.py leaves {home}: give a path inside it, or an absolute path"),
        (["--harness", "inspect", "--task", "big/t.py@t"], "workdir",
         f"the eval project {big} holds 50.0 MB to ship, above the 50.0 MB limit (largest: data.bin, "
         "50.0 MB): exclude what the node does not need (.gitignore or eval.exclude), or fetch large data "
         "on the node"),
        (["--harness", "inspect", "--task", "secret/t.py@t"], "workdir",
         f"{secret}/.env looks like a credential and would ship to the node: exclude it (.gitignore or "
         "eval.exclude), or list it in eval.ship_credentials if it must go"),
    ]  # fmt: skip


def test_bad_drill_inputs_are_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = user_folder(tmp_path)
    monkeypatch.chdir(home)
    for options, field, message in _bad_cases(home):
        out = tmp_path / "out"
        assert drill_cli.main([*options, "--out", str(out)]) == 2, options
        flag = "--task" if field == "task" else "--workdir"
        assert capsys.readouterr().err == f"drill: {flag}: {message}\n"
        assert not out.exists()


def _stack(repo: Path, eval_block: dict[str, Any]) -> Path:
    config = copy.deepcopy(read_stack_config(STACKS["aws-us-east-1"]))
    config.pop("spot-eval:workload")
    config["spot-eval:eval"] = {"concurrency": 2, "max_attempts": 2, "timeout_s": 1800, **eval_block}
    (repo / ".git").mkdir(exist_ok=True)  # the stack file's repository
    (repo / "stacks").mkdir(exist_ok=True)
    path = repo / "stacks" / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_bad_stack_inputs_are_one_line_and_exit_2_before_anything_is_declared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = user_folder(tmp_path)
    for options, field, message in _bad_cases(home):
        harness, task = options[1], options[3]
        stack = _stack(home, {"harness": harness, "task": task, "samples": 2})
        assert plan_cli.main(["--stack", "mine", "--stacks-dir", str(stack.parent)]) == 2
        assert capsys.readouterr().err == f"error: stack config spot-eval:eval.{field}: {message}\n"


# --- a stack that runs the user's own task -------------------------------------------------------


def test_a_stack_ships_and_runs_a_task_from_outside_the_project(tmp_path: Path) -> None:
    from components.mocks import render_stack

    home = user_folder(tmp_path)
    (home / "inspect" / "requirements.txt").write_text("inspect-ai==0.3.285\n")
    (home / "inspect" / "scratch.log").write_text("not for the node")
    (home / "inspect" / ".gitignore").write_text("*.log\n")
    stack = _stack(home, {"harness": "inspect", "task": str(home / "inspect" / "arith12.py") + "@arith12",
                          "samples": [f"q/{a}" for a in range(1, 13)], "shard_size": 6,
                          "requirements": "inspect/requirements.txt"})  # fmt: skip
    rendered = render_stack(stack)
    objects = {o.inputs["key"]: o for o in rendered.of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    with zipfile.ZipFile(objects["spot-eval/agent-bundle.zip"].inputs["source"]["path"]) as zf:
        names = zf.namelist()
        meta = json.loads(zf.read("eval.json"))
    assert [n for n in names if n.startswith("eval")] == [
        "eval/.gitignore", "eval/arith12.jsonl", "eval/arith12.py", "eval/requirements.txt",
        "eval/system.txt", "eval.json",
    ]  # fmt: skip
    assert meta["requirements"] == {"file": "eval/requirements.txt", "lines": ["inspect-ai==0.3.285"]}
    script = user_data(rendered)
    config = agent_template(script)
    command = config["episodes"]["command"]
    assert command[:7] == ["{python}", "-m", "spoteval.harness", "run", "--harness", "inspect", "--task"]
    assert command[7] == "eval/arith12.py@arith12"
    assert config["eval_env"] == {
        "workdir": "eval", "requirements_file": "eval/requirements.txt",
        "venvs_dir": "/mnt/spot-eval-cache/venvs",
    }  # fmt: skip
    assert "pip install -q --disable-pip-version-check 'inspect-ai" not in script  # the venv installs it
    manifest = Path(objects["spot-eval/manifest.jsonl"].inputs["source"]["path"]).read_text().splitlines()
    assert [json.loads(line)["samples"] for line in manifest] == [
        [f"q/{a}" for a in range(1, 7)],
        [f"q/{a}" for a in range(7, 13)],
    ]
    assert "python -m spoteval.bundle unpack /opt/spot-eval/agent-bundle.zip /opt/spot-eval/bundle" in script
    assert "Environment=PYTHONPATH=/opt/spot-eval/bundle" in script


def test_a_stack_names_an_lm_eval_folder_relative_to_its_repository(tmp_path: Path) -> None:
    from components.mocks import render_stack

    home = user_folder(tmp_path)
    stack = _stack(home, {"harness": "lm-eval", "task": "lm@arith10", "samples": 10, "shard_size": 5})
    config = agent_template(user_data(render_stack(stack)))
    command = config["episodes"]["command"]
    assert command[command.index("--task") + 1] == "eval@arith10" and "--options" not in command
    assert config["eval_env"] == {"workdir": "eval", "venvs_dir": "/mnt/spot-eval-cache/venvs"}


def test_the_drills_own_folder_never_ships(tmp_path: Path) -> None:
    from spoteval.drill import DrillConfig, OwnEval
    from spoteval.drill.bundled import prepare

    home = user_folder(tmp_path)
    (home / "drill-1").mkdir()
    (home / "drill-1" / "report.txt").write_text("an earlier drill")
    command = ("python3", "run.py", "{episode_id}", "{output}")
    cfg = DrillConfig(out=home / "drill-1", eval_command=command, episodes=2, own=OwnEval(workdir="."))
    prepared = prepare(cfg, home)
    assert "eval/arith_model.py" in prepared.bundle.files
    assert not [n for n in prepared.bundle.files if n.startswith("eval/drill-1/")]
    assert prepared.eval_env == {"workdir": "eval"} and prepared.command == command
