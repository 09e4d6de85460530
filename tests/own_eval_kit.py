"""A user's own eval outside the project (tests/data/own_eval/, copied into a temporary folder), the
wheel its requirements name, and its known answers: what tests/test_own_eval.py and
tests/test_drill_own.py run."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import zipfile
from pathlib import Path
from typing import Final

DATA: Final = Path(__file__).resolve().parent / "data" / "own_eval"
#: inspect: ids q/1..q/12, "What is a + (a + 2)?": the model is wrong when the sum is a multiple of 3
INSPECT_IDS: Final = [f"q/{a}" for a in range(1, 13)]
INSPECT_RIGHT: Final = {f"q/{a}": (2 * a + 2) % 3 != 0 for a in range(1, 13)}
#: lm-eval: documents 0..9, "What is a + (a + 1)?"
LM_RIGHT: Final = {a: (2 * a + 1) % 3 != 0 for a in range(10)}
INSPECT_QUESTIONS: Final = {f"q/{a}": f"What is {a} + {a + 2}?" for a in range(1, 13)}
LM_QUESTIONS: Final = {a: f"What is {a} + {a + 1}?" for a in range(10)}
WHEEL: Final = "arith_helpers-1.0-py3-none-any.whl"
#: the line the user's model prints when it starts (into the node's server log)
_SERVING: Final = re.compile(r"^arith_model: serving on \S+, pid (\d+)$", re.MULTILINE)


def user_folder(tmp: Path) -> Path:
    """The user's folder: their model, an inspect task folder and an lm-eval task folder."""
    home = tmp / "user"
    shutil.copytree(DATA, home, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    return home


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path) -> Path:
    """A wheel of `arith_helpers` (one function) built here, so that installing it needs no index."""
    folder.mkdir(parents=True, exist_ok=True)
    info = "arith_helpers-1.0.dist-info"
    files = {
        "arith_helpers.py": b'def polite(text: str) -> str:\n    return "Please. " + text\n',
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: arith-helpers\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    record += f"{info}/RECORD,,\n"
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def asked(home: Path) -> list[tuple[str, str]]:
    """(server pid, question) for every question the user's model answered, in order."""
    log = home / "asked.log"
    if not log.exists():
        return []
    return [tuple(line.split("\t", 1)) for line in log.read_text().splitlines() if line]  # type: ignore[misc]


def server_pids(node: Path, run_id: str) -> list[str]:
    """The pids of the user's model servers a drill node started, one per node life, in order: the
    agent appends each life's server output to `work/RUN/server.log` in the node's folder."""
    log = node / "work" / run_id / "server.log"
    return _SERVING.findall(log.read_text()) if log.exists() else []
