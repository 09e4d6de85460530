"""`scripts.drill --server`: bad input is one line and exit 2, and nothing starts (no folder, no
process): `--server vllm` without the vLLM environment names the command that installs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import drill as drill_cli
from spoteval.drill import VLLM_DEFAULTS, server_defaults


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
