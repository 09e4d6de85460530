"""Build the agent bundle: the `spoteval` package, and the user's eval project when there is one.

The archive is deterministic (sorted entries, fixed timestamps, modes 0644 or 0755), so the same
files give the same bytes and the same hash: `pulumi preview` shows no change when nothing changed,
and the drill runs the very archive a stack would upload.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spoteval.bundle import EVAL_DIR, EVAL_JSON
from spoteval.bundle.project import ProjectFile, ProjectSpec, collect, requirement_lines

PACKAGE: Final = "spoteval"
#: Data files shipped beside the package's sources: the harnesses' small tasks (spoteval/harness/tasks/).
DATA_SUFFIXES: Final = (".yaml", ".jsonl")
EVAL_FORMAT: Final = 1
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)
#: the folder that holds `spoteval/` (a checkout, or an unpacked bundle)
ROOT: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Bundle:
    data: bytes
    sha256: str
    files: tuple[str, ...]
    #: eval.json's content when the bundle holds an eval project (spoteval/bundle/__init__.py)
    eval: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, name: str) -> bytes:
        """One member's bytes (KeyError when the bundle has no such file)."""
        with zipfile.ZipFile(io.BytesIO(self.data)) as zf:
            return zf.read(name)


def source_files(root: Path = ROOT, package: str = PACKAGE) -> list[Path]:
    """The package's Python sources and task data (no caches, no compiled files), sorted."""
    base = root / package
    if not (base / "__init__.py").is_file():
        raise FileNotFoundError(f"{base}: not a Python package")
    return sorted(
        p
        for p in base.rglob("*")
        if (p.suffix == ".py" or (p.suffix in DATA_SUFFIXES and "tasks" in p.parts))
        and p.is_file()
        and "__pycache__" not in p.parts
        and not p.name.startswith(".")
    )


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.external_attr = (0o755 if executable else 0o644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _eval_json(spec: ProjectSpec, files: Sequence[ProjectFile], digest: str) -> dict[str, Any]:
    lines = requirement_lines(spec, files)
    requirements: dict[str, Any] | None = None
    if spec.requirements_file is not None:
        requirements = {"file": f"{EVAL_DIR}/{spec.requirements_file}", "lines": lines}
    elif lines is not None:
        requirements = {"lines": lines}
    return {
        "format": EVAL_FORMAT,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "sha256": digest,
        "requirements": requirements,
    }


def build_bundle(root: Path = ROOT, package: str = PACKAGE, project: ProjectSpec | None = None) -> Bundle:
    """Zip the package, and the eval project under `eval/` (checked: ProjectError), deterministically."""
    files = collect(project) if project is not None else []
    buffer = io.BytesIO()
    names: list[str] = []
    meta: dict[str, Any] | None = None
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for path in source_files(root, package):
            name = path.relative_to(root).as_posix()
            _add(archive, name, path.read_bytes())
            names.append(name)
        if project is not None:
            digest = hashlib.sha256()
            for f in files:
                data = f.path.read_bytes()
                digest.update(f"{f.rel}\0{len(data)}\0".encode())
                digest.update(data)
                _add(archive, f"{EVAL_DIR}/{f.rel}", data, f.executable)
                names.append(f"{EVAL_DIR}/{f.rel}")
            meta = _eval_json(project, files, digest.hexdigest())
            _add(archive, EVAL_JSON, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
            names.append(EVAL_JSON)
    data = buffer.getvalue()
    return Bundle(data=data, sha256=hashlib.sha256(data).hexdigest(), files=tuple(names), eval=meta)


def write_bundle(bundle: Bundle, directory: Path | None = None) -> Path:
    """Write the archive under a content-addressed name (for a `pulumi.FileAsset`) and return the path."""
    directory = directory or Path(tempfile.gettempdir()) / "spot-eval-bundle"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"agent-bundle-{bundle.sha256[:16]}.zip"
    if not path.exists() or path.read_bytes() != bundle.data:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(bundle.data)
        tmp.replace(path)
    return path
