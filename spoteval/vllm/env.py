"""The vLLM environment (`make vllm` -> `venv-vllm/`), its tiny model, and the server it runs.

- `find_env()`: the environment, or `VllmMissing` whose message names the command that installs it
  (the drill turns that into one line and exit 2, before anything starts). `SPOTEVAL_VLLM_ENV`
  points elsewhere than the project's `venv-vllm/`.
- `VllmEnv.model()`: the tiny model (spoteval/vllm/tiny_model.py), built at first use into the
  environment's `models/` folder, named by a digest of its recipe (a changed recipe builds anew).
- `server_command(env, model, cache_dir)`: the argv that serves it on `{port}` through our launcher
  (spoteval/vllm/serve.py), with vLLM's compile and model-inspection cache (`VLLM_CACHE_ROOT`) and
  the Hugging Face cache under `cache_dir`: the node's weights disk, kept across restarts.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from spoteval.vllm.facts import CACHE_ENV

PACKAGE_DIR: Final = Path(__file__).resolve().parent
PROJECT_ROOT: Final = PACKAGE_DIR.parent.parent
ENV_VARIABLE: Final = "SPOTEVAL_VLLM_ENV"
DEFAULT_ENV: Final = PROJECT_ROOT / "venv-vllm"
INSTALL_COMMAND: Final = "make vllm"
READY_MARK: Final = ".ready"  # written by `make vllm` once the environment passed its check
SERVE_SCRIPT: Final = PACKAGE_DIR / "serve.py"
MODEL_SCRIPT: Final = PACKAGE_DIR / "tiny_model.py"
MODEL_NAME: Final = "tiny-llama"
#: the names the server answers to: the model's, and the one the sample episode asks for
SERVED_NAMES: Final = (MODEL_NAME, "standin")
#: the server's settings on this machine's CPU: float32 (bf16 with --enforce-eager crashed the
#: worker on its first request), a short context and few sequences for the tiny model
SERVER_ARGS: Final = ("--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "16")
MODEL_BUILD_TIMEOUT_S: Final = 900.0


class VllmMissing(Exception):
    """The vLLM environment is not installed (or not usable); the message names the command."""


@dataclass(frozen=True)
class VllmEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def model_dir(self) -> Path:
        digest = hashlib.sha256(MODEL_SCRIPT.read_bytes()).hexdigest()[:12]
        return self.root / "models" / f"{MODEL_NAME}-{digest}"

    def model(self) -> Path:
        """The tiny model's folder, built now if it is not there yet (about 10-40 s)."""
        out = self.model_dir()
        if (out / "config.json").is_file():
            return out
        try:
            done = subprocess.run(
                [str(self.python), str(MODEL_SCRIPT), str(out)],
                capture_output=True,
                text=True,
                timeout=MODEL_BUILD_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise VllmMissing(f"building the tiny model in {out} failed: {exc}") from None
        if done.returncode != 0 or not (out / "config.json").is_file():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise VllmMissing(f"building the tiny model in {out} failed: {tail}")
        return out


def find_env(root: Path | str | None = None) -> VllmEnv:
    """The vLLM environment at `root` (default: `$SPOTEVAL_VLLM_ENV`, else the project's venv-vllm/)."""
    path = Path(root or os.environ.get(ENV_VARIABLE) or DEFAULT_ENV)
    env = VllmEnv(path)
    if not env.python.is_file() or not (path / READY_MARK).is_file():
        raise VllmMissing(
            f"the vLLM environment is not installed at {path}: install it with `{INSTALL_COMMAND}`"
            " (about 4-6 minutes, 3.5 GB)"
        )
    return env


def server_environment(cache_dir: Path) -> dict[str, str]:
    """What the server keeps on the weights disk: vLLM's caches and the Hugging Face cache."""
    return {
        CACHE_ENV: str(cache_dir / "vllm"),
        "HF_HOME": str(cache_dir / "huggingface"),
    }


def server_command(
    env: VllmEnv,
    model: Path,
    cache_dir: Path,
    *,
    port: str = "{port}",
    extra: Mapping[str, str] | None = None,
    launcher: Path = SERVE_SCRIPT,
) -> tuple[str, ...]:
    """The argv that serves `model` on 127.0.0.1:`port` with its caches under `cache_dir`, through
    `launcher` (serve.py: this checkout's, or the copy in the bundle a drill's node unpacked).

    It starts with `env NAME=VALUE ...` (which execs the launcher: the server's process group is
    the agent's child's), so the agent's config shows where the caches are."""
    variables = {**server_environment(cache_dir), **(extra or {})}
    return (
        "env",
        *(f"{k}={v}" for k, v in sorted(variables.items())),
        str(env.python),
        str(launcher),
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--served-model-name",
        *SERVED_NAMES,
        *SERVER_ARGS,
    )
