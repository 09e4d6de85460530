"""The node agent bundle: the pure-Python `spoteval` package as one zip archive.

The program uploads the archive into the result bucket (VMs) or a ConfigMap (Kubernetes); the node
puts the zip itself on `PYTHONPATH` (Python imports from zip files), so nothing is unpacked:

    agent-bundle.zip
        spoteval/__init__.py
        spoteval/agent/__init__.py, __main__.py, ...
        spoteval/record.py, store.py, grant.py, ...

The archive is deterministic (sorted entries, fixed timestamps and permissions), so the same source
gives the same bytes and the same hash, and `pulumi preview` shows no change when nothing changed.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PACKAGE: Final = "spoteval"
#: object key of the bundle inside the result bucket (outside the run record's `runs/` prefix)
OBJECT_KEY: Final = "spot-eval/agent-bundle.zip"
#: object key of the staged manifest the node registers for its run
MANIFEST_KEY: Final = "spot-eval/manifest.jsonl"

_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)
_REPO: Final = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Bundle:
    data: bytes
    sha256: str
    files: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.data)


#: Data files shipped beside the sources: the harnesses' small tasks (spoteval/harness/tasks/).
DATA_SUFFIXES: Final = (".yaml", ".jsonl")


def source_files(root: Path = _REPO, package: str = PACKAGE) -> list[Path]:
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


def build_bundle(root: Path = _REPO, package: str = PACKAGE) -> Bundle:
    """Zip the package deterministically."""
    buffer = io.BytesIO()
    names: list[str] = []
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for path in source_files(root, package):
            name = path.relative_to(root).as_posix()
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
            names.append(name)
    data = buffer.getvalue()
    return Bundle(data=data, sha256=hashlib.sha256(data).hexdigest(), files=tuple(names))


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
