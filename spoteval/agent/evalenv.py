"""The user's eval environment on the node: the eval project's folder and its requirements' venv.

The agent config's `eval_env` section (built from `eval.workdir` / `eval.requirements`, or the
drill's `--workdir` / `--requirements`) names, relative to the unpacked bundle's root (the folder
that holds `spoteval/`):

- `workdir`: the folder the episodes start in (the eval project, `eval/` in the bundle);
- `requirements_file` or `requirements`: what the user's eval needs installed;
- `venvs_dir`: where the requirements' virtual environments live: the weights-cache disk on a
  VM (`/mnt/spot-eval-cache/venvs`), which outlives a preemption.

While the model server warms up, the agent prepares the environment once per start:

- the venv is `venvs_dir/{key}`, `key` the hash of the requirements (their text, and the content
  of any local path they name), of the interpreter's version and of the agent's environment;
- it is layered on the agent's own interpreter: a `.pth` file puts the agent's site folders after
  the venv's own (obstore, whatever the image holds, the harness if the node installed it), and
  `pip install -r` adds what the requirements name over them (a version the agent's environment
  also has is installed into the venv, which comes first on the path);
- it is complete once `spoteval-env.json` is written in it; a start that finds it complete reuses
  it (`ready` says `reused: true`, and S does not pay the install again); a half-built one (the node
  was taken during the install) is built again;
- a failed install is tried once per start: every attempt of that start is then a `harness_error`
  carrying pip's last lines, without running pip again (no retry storm); the next start tries again.

The episodes get `{python}` (the venv's interpreter, else the agent's), `VIRTUAL_ENV` and the
venv's `bin/` first on `PATH`, so `python` and the harness's own commands are the venv's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spoteval.config_reader import Reader

MARKER: Final = "spoteval-env.json"
LAYER_PTH: Final = "_spoteval_layer.pth"
INSTALL_TIMEOUT_S: Final = 1800.0
_TAIL_LINES: Final = 8
_SKIP: Final = frozenset({"__pycache__", ".git", "build"})
#: the folder that holds `spoteval/` (the unpacked bundle on a node)
BUNDLE_ROOT: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EvalEnvConfig:
    venvs_dir: str
    workdir: str | None = None  # relative to the bundle root (or absolute)
    requirements_file: str | None = None  # relative to the bundle root (or absolute)
    requirements: tuple[str, ...] | None = None
    install_timeout_s: float = INSTALL_TIMEOUT_S


def parse_eval_env(section: Reader) -> EvalEnvConfig:
    """The agent config's `eval_env` section, read with the config's errors (each names its key)."""
    venvs_dir = section.string("venvs_dir")
    if not os.path.isabs(venvs_dir):
        section.fail("venvs_dir", f"{venvs_dir!r} must be an absolute path")
    requirements = section.value("requirements")
    if requirements is not None and (
        not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements)
    ):
        section.fail("requirements", "must be a list of requirement strings")
    cfg = EvalEnvConfig(
        venvs_dir=venvs_dir,
        workdir=_in_bundle(section, "workdir"),
        requirements_file=_in_bundle(section, "requirements_file"),
        requirements=None if requirements is None else tuple(requirements),
        install_timeout_s=section.number("install_timeout_s", INSTALL_TIMEOUT_S, positive=True),
    )
    if cfg.requirements is not None and cfg.requirements_file is not None:
        section.fail_at(section.where, "give requirements or requirements_file, not both")
    section.done()
    return cfg


def _in_bundle(section: Reader, key: str) -> str | None:
    """A path inside the bundle (relative, no `..`) or an absolute one."""
    value = section.opt_string(key)
    if value is not None and not os.path.isabs(value) and ".." in value.split("/"):
        section.fail(key, f"{value!r} must stay inside the bundle")
    return value


@dataclass
class Prepared:
    python: str  # what `{python}` becomes
    cwd: str | None = None  # the episodes' working folder
    env: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] | None = None  # for the `ready` event
    error: str | None = None  # the install failed: every attempt of this start is a harness_error

    def spawn_args(self) -> dict[str, Any]:
        """What `episodes.spawn` takes from the eval environment."""
        return {"python": self.python, "cwd": self.cwd, "refused": self.error}


def _clean(line: str) -> str:
    text = line.strip()
    if text.startswith("#"):
        return ""
    return text.split(" #", 1)[0].strip()


def local_paths(lines: Sequence[str], base: Path) -> list[Path]:
    """The local files and folders requirement lines name (`./pkg`, `-e .`, `/abs/x.whl`, `file:`)."""
    out: list[Path] = []
    for line in lines:
        text = _clean(line)
        for flag in ("-e ", "--editable "):
            if text.startswith(flag):
                text = text[len(flag) :].strip()
        if text.startswith("file:"):
            text = text[len("file:") :].lstrip("/")
            text = "/" + text
        if text.startswith((".", "/")):
            out.append(Path(os.path.normpath(base / text.split("[", 1)[0])))
    return out


def _tree_hash(path: Path, digest: Any) -> None:
    if path.is_file():
        digest.update(f"{path.name}\0".encode())
        digest.update(path.read_bytes())
        return
    if not path.is_dir():
        digest.update(f"missing:{path}\0".encode())
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(
            d for d in dirs if d not in ("__pycache__", ".git", "build") and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            file = Path(root, name)
            digest.update(f"{file.relative_to(path).as_posix()}\0".encode())
            digest.update(file.read_bytes())


def parent_site_paths() -> list[str]:
    """The agent interpreter's site folders (what the venv is layered on), in its search order."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
    pythonpath = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    out: list[str] = []
    for p in sys.path[1:]:
        real = os.path.realpath(p) if p else ""
        if not p or real in pythonpath or not os.path.isdir(p) or real == str(BUNDLE_ROOT):
            continue
        in_stdlib = any(real == s or real.startswith(s + os.sep) for s in stdlib)
        if in_stdlib and "site-packages" not in real and "dist-packages" not in real:
            continue
        if p not in out:
            out.append(p)
    return out


def venv_key(lines: Sequence[str], base: Path) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([_clean(line) for line in lines if _clean(line)]).encode())
    digest.update(f"\0{sys.implementation.name}-{sys.version}\0{sys.prefix}\0".encode())
    digest.update("\0".join(parent_site_paths()).encode())
    for path in local_paths(lines, base):
        _tree_hash(path, digest)
    return digest.hexdigest()[:16]


def _tail(path: Path) -> str:
    try:
        lines = [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return "\n".join(lines[-_TAIL_LINES:])[-1500:]


class InstallError(Exception):
    """The requirements could not be installed; the message ends with pip's last lines."""


def _run(argv: list[str], log: Path, cwd: Path, timeout: float) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PIP_USER")}
    with open(log, "ab") as out:
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise InstallError(f"requirements install took longer than {timeout:g} s") from None
        except OSError as exc:
            raise InstallError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        what = " ".join(argv[1:4])
        raise InstallError(f"requirements install failed ({what} exited {done.returncode}):\n{_tail(log)}")


def base_python() -> str:
    """The interpreter the agent's own environment was made from (a venv is made from that one)."""
    major, minor = sys.version_info[:2]
    for name in (f"python{major}.{minor}", f"python{major}", "python"):
        candidate = os.path.join(sys.base_prefix, "bin", name)
        if os.path.exists(candidate):
            return candidate
    return sys.executable


def build_venv(target: Path, lines_file: Path, cwd: Path, timeout: float) -> None:
    """Create the layered venv at `target` and install the requirements into it (InstallError)."""
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / f"{target.name}.install.log"
    log.write_bytes(b"")
    _run([base_python(), "-m", "venv", "--without-pip", str(target)], log, cwd, timeout)
    python = target / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, LAYER_PTH).write_text("".join(p + "\n" for p in parent_site_paths()))
    has_pip = subprocess.run([str(python), "-c", "import pip"], capture_output=True, check=False)
    if has_pip.returncode != 0:
        _run([str(python), "-m", "ensurepip", "--default-pip"], log, cwd, timeout)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "-r", str(lines_file)], log, cwd, timeout)


def _requirements(cfg: EvalEnvConfig, root: Path) -> tuple[list[str], Path, Path] | None:
    """(lines, the file pip reads, the folder pip runs in), or None without requirements."""
    if cfg.requirements_file is not None:
        file = root / cfg.requirements_file
        return file.read_text(encoding="utf-8").splitlines(), file, file.parent
    if cfg.requirements is not None:
        base = root / cfg.workdir if cfg.workdir else root
        return list(cfg.requirements), Path(), base
    return None


def prepare(cfg: EvalEnvConfig | None, log: Callable[[str], None], root: Path = BUNDLE_ROOT) -> Prepared:
    """The eval environment of this start (never raises: a failure is `Prepared.error`)."""
    if cfg is None:
        return Prepared(python=sys.executable)
    cwd = str(root / cfg.workdir) if cfg.workdir else None
    if cwd is not None and not os.path.isdir(cwd):
        return Prepared(python=sys.executable, cwd=None, error=f"eval_env.workdir {cwd} is not in the bundle")
    try:
        found = _requirements(cfg, root)
    except OSError as exc:
        return Prepared(python=sys.executable, cwd=cwd, error=f"requirements file: {exc.strerror or exc}")
    if found is None:
        return Prepared(python=sys.executable, cwd=cwd, details={"requirements": None})
    lines, file, pip_cwd = found
    key = venv_key(lines, pip_cwd)
    venvs = Path(cfg.venvs_dir)
    target = venvs / key
    details: dict[str, Any] = {"requirements": key, "venv": str(target)}
    t0 = time.monotonic()
    try:
        venvs.mkdir(parents=True, exist_ok=True)
        with open(venvs / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            reused = (target / MARKER).is_file() and (target / "bin" / "python").exists()
            if not reused:
                log(f"eval env: installing the requirements into {target}")
                if cfg.requirements_file is None:
                    file = venvs / f"{key}.requirements.txt"
                    file.write_text("".join(line + "\n" for line in lines))
                build_venv(target, file, pip_cwd, cfg.install_timeout_s)
                took = round(time.monotonic() - t0, 3)
                marker = {"key": key, "requirements": lines, "install_s": took}
                (target / MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n")
    except (InstallError, OSError, subprocess.SubprocessError) as exc:
        message = str(exc) if isinstance(exc, InstallError) else f"requirements install failed: {exc}"
        log(f"eval env: {message}")
        details.update(reused=False, install_s=round(time.monotonic() - t0, 3), failed=True)
        return Prepared(python=sys.executable, cwd=cwd, details=details, error=message)
    details.update(reused=reused, install_s=0.0 if reused else round(time.monotonic() - t0, 3))
    log(f"eval env: {'reusing' if reused else 'installed'} {target} ({details['install_s']} s)")
    bin_dir = str(target / "bin")
    env = {"VIRTUAL_ENV": str(target), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    return Prepared(python=str(target / "bin" / "python"), cwd=cwd, env=env, details=details)


class Preparing:
    """`prepare` in a thread, started with the model server and waited for before the first dispatch."""

    def __init__(self, cfg: EvalEnvConfig | None, log: Callable[[str], None]) -> None:
        self.result: Prepared | None = None
        self.done = threading.Event()
        self.ready_mono: float | None = None
        self._thread = threading.Thread(target=self._work, args=(cfg, log), name="eval-env", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _work(self, cfg: EvalEnvConfig | None, log: Callable[[str], None]) -> None:
        try:
            self.result = prepare(cfg, log)
        except Exception as exc:  # pragma: no cover - prepare reports its own failures
            self.result = Prepared(python=sys.executable, error=f"eval env: {exc}")
        self.ready_mono = time.monotonic()
        self.done.set()

    def ready_details(self, started_mono: float) -> dict[str, Any]:
        """The `ready` event's `eval_env` (requirements key, reused, install seconds) and timing."""
        if self.result is None or self.result.details is None:
            return {}
        out: dict[str, Any] = {"eval_env": self.result.details}
        if self.ready_mono is not None:
            out["agent_to_eval_env_s"] = round(self.ready_mono - started_mono, 3)
        return out

    def get(self) -> Prepared:
        with contextlib.suppress(RuntimeError):
            self._thread.join()
        assert self.result is not None
        return self.result
