"""The user's eval project: the folder that goes to the node beside spot-eval, and what of it ships.

The project is the folder that holds the task (an inspect task file's folder, an lm-eval task
folder) or the folder the user names (`eval.workdir`, the drill's `--workdir`). It ships as it is at
home, less:

- what `.gitignore` files in it exclude (git's rules, spoteval/bundle/ignore.py), what the user
  excludes on top (`eval.exclude`, `--exclude`), and version control, caches and local virtual
  environments (`ignore.DEFAULT_EXCLUDES`);

and it is refused, with one line, when:

- it holds more than `SIZE_LIMIT` bytes to ship (the largest file is named: exclude it, or fetch
  large data on the node);
- a file that ships looks like a credential (`CREDENTIAL_PATTERNS`: `.env`, `*.pem`, private keys,
  cloud credential files) and the user has not listed it (`eval.ship_credentials`,
  `--ship-credential`): the bundle sits in the result bucket, readable by every node of the run.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from spoteval.bundle.ignore import DEFAULT_EXCLUDES, Rule, compile_lines, compile_pattern, ignored

#: The most an eval project may ship, in bytes (files as they are, before compression): 50 MB.
SIZE_LIMIT: Final = 50_000_000
#: Files that look like credentials (.gitignore syntax, matched at any depth), refused unless listed.
CREDENTIAL_PATTERNS: Final = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".netrc",
    ".pypirc",
    ".git-credentials",
    "credentials",
    "credentials.json",
    ".aws/",
    ".azure/",
    ".kube/",
    ".docker/config.json",
    "kubeconfig",
    "application_default_credentials.json",
    "*service-account*.json",
    "*.tfstate",
)
#: Names that look like credentials but are templates people commit on purpose.
_TEMPLATES: Final = (".env.example", ".env.sample", ".env.template", ".env.dist")
_CREDENTIALS: Final = compile_lines(CREDENTIAL_PATTERNS)


class ProjectError(Exception):
    """A project that cannot ship; `field` is what the user gave: workdir, exclude, ship_credentials,
    requirements (the stack names it `eval.FIELD`, the drill `--FIELD`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ProjectSpec:
    root: Path  # an absolute folder
    excludes: tuple[str, ...] = ()  # .gitignore-style patterns, relative to `root`
    ship_credentials: tuple[str, ...] = ()  # credential-looking files (relative paths) to ship anyway
    requirements_file: str | None = None  # a requirements file in the project (relative path)
    requirements: tuple[str, ...] | None = None  # or the requirements as a list


@dataclass(frozen=True)
class ProjectFile:
    rel: str  # posix path relative to the project
    path: Path
    size: int
    executable: bool


def looks_like_credential(rel: str) -> bool:
    """Whether a project path looks like a credential file (or lies in a credentials folder)."""
    name = rel.rsplit("/", 1)[-1]
    if name in _TEMPLATES:
        return False
    parts = rel.split("/")
    folders = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    return ignored(_CREDENTIALS, rel, False) or any(ignored(_CREDENTIALS, f, True) for f in folders)


def _gitignore(folder: Path, base: str) -> list[Rule]:
    path = folder / ".gitignore"
    if not path.is_file():
        return []
    try:
        return compile_lines(path.read_text(encoding="utf-8", errors="replace").splitlines(), base)
    except OSError:
        return []


def walk(spec: ProjectSpec) -> list[ProjectFile]:
    """Every file of the project that ships, sorted by path (no checks)."""
    root = spec.root
    defaults = compile_lines(DEFAULT_EXCLUDES)
    user = [r for r in (compile_pattern(p) for p in spec.excludes) if r is not None]
    rules_of: dict[str, list[Rule]] = {"": defaults + _gitignore(root, "")}
    files: list[ProjectFile] = []
    for folder, dirs, names in os.walk(root):
        rel_dir = Path(folder).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        rules = rules_of[rel_dir]
        kept: list[str] = []
        for d in sorted(dirs):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if os.path.islink(os.path.join(folder, d)) or ignored([*rules, *user], rel, True):
                continue
            rules_of[rel] = rules + _gitignore(Path(folder, d), rel)
            kept.append(d)
        dirs[:] = kept
        for name in sorted(names):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            path = Path(folder, name)
            if not path.is_file() or ignored([*rules, *user], rel, False):
                continue
            st = path.stat()
            files.append(ProjectFile(rel, path, st.st_size, bool(st.st_mode & stat.S_IXUSR)))
    return sorted(files, key=lambda f: f.rel)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def collect(spec: ProjectSpec) -> list[ProjectFile]:
    """The files that ship, checked: size, credentials, the requirements file (ProjectError)."""
    if not spec.root.is_dir():
        raise ProjectError("workdir", f"{spec.root} is not a folder")
    files = walk(spec)
    shipped = {f.rel for f in files}
    for listed in spec.ship_credentials:
        if listed not in shipped:
            raise ProjectError(
                "ship_credentials", f"{listed} is not a file that ships from the eval project {spec.root}"
            )
    secrets = [f.rel for f in files if looks_like_credential(f.rel) and f.rel not in spec.ship_credentials]
    if secrets:
        more = f" (and {len(secrets) - 1} more)" if len(secrets) > 1 else ""
        raise ProjectError(
            "workdir",
            f"{spec.root}/{secrets[0]} looks like a credential{more} and would ship to the node: exclude it "
            "(.gitignore or eval.exclude), or list it in eval.ship_credentials if it must go",
        )
    total = sum(f.size for f in files)
    if total > SIZE_LIMIT:
        largest = max(files, key=lambda f: f.size)
        raise ProjectError(
            "workdir",
            f"the eval project {spec.root} holds {_mb(total)} to ship, above the {_mb(SIZE_LIMIT)} limit "
            f"(largest: {largest.rel}, {_mb(largest.size)}): exclude what the node does not need "
            "(.gitignore or eval.exclude), or fetch large data on the node",
        )
    if spec.requirements_file is not None and spec.requirements_file not in shipped:
        raise ProjectError(
            "requirements",
            f"{spec.requirements_file} is not a file that ships from the eval project {spec.root}",
        )
    return files


def requirement_lines(spec: ProjectSpec, files: Sequence[ProjectFile]) -> list[str] | None:
    """The requirements' lines (from the file or the list), for eval.json; None without any."""
    if spec.requirements is not None:
        return list(spec.requirements)
    if spec.requirements_file is None:
        return None
    path = next(f.path for f in files if f.rel == spec.requirements_file)
    return path.read_text(encoding="utf-8").splitlines()
