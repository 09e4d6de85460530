"""Unpack the agent bundle into a fresh folder (standard library only: this runs on the node).

    python -m spoteval.bundle unpack ZIP DIR

`DIR` is replaced as a whole: the archive is unpacked next to it (`DIR.new-PID`), then renamed into
place, and the old folder removed, so a node never runs from a half-written or stale bundle. A
folder already unpacked from the very same archive (`.bundle-sha256` in it names its hash) is kept
as it is, with the bytecode Python compiled there: a restart after a preemption does not pay that
again, and a new bundle is unpacked afresh. File modes come from the archive (0755 for executables,
0644 otherwise). A member whose name would leave the folder (absolute, `..`) is refused.

It runs from the archive itself (`PYTHONPATH=ZIP python -m spoteval.bundle unpack ZIP DIR`): a
node needs nothing but Python to get from the zip to the folder it then puts on `PYTHONPATH`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath


class UnpackError(Exception):
    """The archive cannot be unpacked (one line)."""


def _member_path(root: Path, name: str) -> Path:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise UnpackError(f"bundle member {name!r} would leave the folder")
    return root.joinpath(*pure.parts)


STAMP = ".bundle-sha256"


def _sha256(archive: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(archive, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(archive: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Unpack `archive` into `dest` (replaced as a whole, unless unpacked from it already)."""
    target = Path(dest)
    try:
        sha = _sha256(archive)
    except OSError as exc:
        raise UnpackError(f"cannot read {archive}: {exc.strerror or exc}") from None
    stamp = target / STAMP
    if stamp.is_file() and stamp.read_text().strip() == sha:
        return target
    staging = target.with_name(f"{target.name}.new-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            staging.mkdir(parents=True)
            for info in zf.infolist():
                path = _member_path(staging, info.filename)
                if info.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out)
                mode = (info.external_attr >> 16) & 0o777
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)
            (staging / STAMP).write_text(sha + "\n")
    except (OSError, zipfile.BadZipFile) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UnpackError(f"cannot unpack {archive}: {exc}") from None
    except UnpackError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[0] != "unpack":
        print("usage: python -m spoteval.bundle unpack ZIP DIR", file=sys.stderr)
        return 2
    try:
        unpack(args[1], args[2])
    except UnpackError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 1
    return 0
