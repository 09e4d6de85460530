"""`scripts.drill --server`: bad input is one line and exit 2, and nothing starts (no folder, no
process): `--server vllm` without the vLLM environment names the command that installs it; with a
user's own task and a pool, what each node's agent is given (the bundle's launcher, the caches)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scripts import drill as drill_cli
from spoteval.bundle.unpack import unpack
from spoteval.drill import DRILL_POOL, VLLM_DEFAULTS, agent_config, server_defaults
from spoteval.drill.bundled import prepare
from spoteval.drill.config import VLLM_READY_TIMEOUT_S
from spoteval.vllm import VllmEnv
from spoteval.vllm.env import SERVER_ARGS
from tests.own_eval_kit import INSPECT_IDS, user_folder

LAUNCHER = "spoteval/vllm/serve.py"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--server", "vllm"],
         "drill: --server vllm: the vLLM environment is not installed at {env}: "
         "install it with `make vllm` (about 4-6 minutes, 3.5 GB)"),
        (["--server", "vllm", "--server-command", "x {port}"],
         "drill: --server vllm runs its own server command: give no --server-command"),
        (["--server", "tgi"],
         "drill: argument --server: invalid choice: 'tgi' (choose from 'standin', 'vllm')"),
        (["--preempt-after-results", "0"], "drill: --preempt-after-results must be >= 1, got 0"),
        (["--preempt-after-results", "3", "--harness", "inspect", "--preempt-after-samples", "2"],
         "drill: give --preempt-after-results or --preempt-after-samples, not both"),
    ],
)  # fmt: skip
def test_bad_server_input_is_one_line_and_starts_nothing(
    args: list[str],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = tmp_path / "no-vllm-here"
    monkeypatch.setenv("SPOTEVAL_VLLM_ENV", str(env))
    out = tmp_path / "drill"
    assert drill_cli.main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == says.format(env=env) + "\n"
    assert not out.exists()


def test_vllm_changes_only_the_defaults_it_names() -> None:
    standin, vllm = server_defaults("standin"), server_defaults("vllm")
    assert {k for k in standin if standin[k] != vllm[k]} == set(VLLM_DEFAULTS)
    args = drill_cli._parser().parse_args(["--server", "vllm", "--episodes", "7"])
    cfg = drill_cli.config_from(args)
    assert (cfg.server, cfg.episodes, cfg.lifetime_s, cfg.episode_seconds) == ("vllm", 7, 180.0, (2.0, 8.0))


def _fake_vllm_env(root: Path) -> VllmEnv:
    """A vLLM environment as `make vllm` leaves it, for what the drill wires before anything starts:
    its Python, the ready mark and the tiny model's folder (no server runs from it here)."""
    env = VllmEnv(root)
    env.python.parent.mkdir(parents=True)
    env.python.symlink_to(sys.executable)
    (root / ".ready").write_text("")
    env.model_dir().mkdir(parents=True)
    (env.model_dir() / "config.json").write_text("{}")
    return env


def _vllm_argv(env: VllmEnv, home: Path, node: Path, port: int) -> list[str]:
    """The server command a drill's node `node` runs vLLM with: in the drill's folder `home`, the
    vLLM environment's Python, the launcher from the node's unpacked bundle, the caches on its disk."""
    return [
        "/bin/sh", "-c", 'cd "$0" && exec "$@"', str(home.resolve()),
        "env", f"HF_HOME={node}/cache/huggingface", f"VLLM_CACHE_ROOT={node}/cache/vllm",
        str(env.python), str(node / "bundle" / LAUNCHER), str(env.model_dir()),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny-llama", "standin",
        *SERVER_ARGS,
    ]  # fmt: skip


def test_vllm_with_an_own_lm_eval_folder_on_one_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--server vllm --harness lm-eval --task lm@arith10` (a user's own lm-eval folder outside the
    project), one node: the task as the bundle holds it, the model the server answers to, vLLM run
    through the bundle's launcher with the node's caches; nothing written."""
    env = _fake_vllm_env(tmp_path / "venv-vllm")
    monkeypatch.setenv("SPOTEVAL_VLLM_ENV", str(env.root))
    home = user_folder(tmp_path)
    monkeypatch.chdir(home)
    out = tmp_path / "drill"
    argv = ["--server", "vllm", "--harness", "lm-eval", "--task", "lm@arith10", "--out", str(out)]
    cfg = drill_cli.config_from(drill_cli._parser().parse_args(argv))
    cfg.check()
    prepared = prepare(cfg)
    assert {LAUNCHER, "eval/arith10.yaml", "eval/arith10.jsonl"} <= set(prepared.bundle.files)
    assert [e.params["samples"] for e in prepared.entries] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    command = list(prepared.command)
    assert command[command.index("--task") + 1] == "eval@arith10"
    assert command[command.index("--model") + 1] == "standin"
    config = agent_config(
        cfg, "r", "file:///store", {}, 8100,
        episodes_command=prepared.command, eval_env=prepared.eval_env, home=prepared.base,
    )  # fmt: skip
    node = out.resolve() / "node"
    assert config["server"]["command"] == _vllm_argv(env, home, node, 8100)
    assert config["episodes"]["command"] == command
    assert config["eval_env"] == {"workdir": "eval", "venvs_dir": f"{node}/cache/venvs"}
    assert "pool" not in config
    assert not out.exists()


def test_vllm_with_an_own_task_in_a_pool_runs_the_bundles_launcher_from_the_drills_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--server vllm --task` (a user's own inspect task outside the project) `--nodes 2`: accepted,
    the task planned from the bundle as built, and each node's agent config runs vLLM through the
    launcher its own unpacked bundle holds, in the folder the drill runs in, with the vLLM
    environment's Python and the caches and eval venvs on that node's weights disk."""
    env = _fake_vllm_env(tmp_path / "venv-vllm")
    monkeypatch.setenv("SPOTEVAL_VLLM_ENV", str(env.root))
    home = user_folder(tmp_path)
    monkeypatch.chdir(home)
    out = tmp_path / "drill"
    argv = ["--server", "vllm", "--harness", "inspect", "--task", "inspect/arith12.py@arith12"]
    argv += ["--shard-size", "6", "--nodes", "2", "--out", str(out)]
    cfg = drill_cli.config_from(drill_cli._parser().parse_args(argv))
    cfg.check()
    assert (cfg.server, cfg.harness, cfg.own.task, cfg.nodes) == ("vllm", "inspect", argv[5], 2)
    prepared = prepare(cfg)
    assert prepared.base == home.resolve()
    shipped = {LAUNCHER, "eval/arith12.py", "eval/arith12.jsonl", "eval/system.txt"}
    assert shipped <= set(prepared.bundle.files)
    assert [e.params["samples"] for e in prepared.entries] == [INSPECT_IDS[:6], INSPECT_IDS[6:]]
    command = list(prepared.command)
    assert command[command.index("--task") + 1] == "eval/arith12.py@arith12"  # as the bundle holds it
    assert command[command.index("--model") + 1] == "standin"  # a name the vLLM server answers to
    assert prepared.eval_env == {"workdir": "eval"}
    for index, port in ((1, 8101), (2, 8102)):
        config = agent_config(
            cfg, "r", "file:///store", {}, port, index=index,
            episodes_command=prepared.command, eval_env=prepared.eval_env, home=prepared.base,
        )  # fmt: skip
        node = out.resolve() / f"node-{index}"
        assert config["server"]["command"] == _vllm_argv(env, home, node, port)
        assert config["server"]["ready_timeout_s"] == VLLM_READY_TIMEOUT_S
        assert config["episodes"]["command"] == command
        assert config["eval_env"] == {"workdir": "eval", "venvs_dir": f"{node}/cache/venvs"}
        assert config["pool"] == dict(DRILL_POOL)
    assert not out.exists()  # nothing written or started by the checks and the wiring
    # the launcher named is the one each node's startup path unpacks from the drill's bundle
    archive = tmp_path / "agent-bundle.zip"
    archive.write_bytes(prepared.bundle.data)
    for index in (1, 2):
        root = unpack(archive, out.resolve() / f"node-{index}" / "bundle")
        assert (root / LAUNCHER).read_bytes() == prepared.bundle.read(LAUNCHER)
