"""The drill node's startup path: what the startup script is on a real node.

`python -m spoteval.drill node --config agent.json --boot-file F --bundle ZIP` notes the boot time in
the agent's boot file, unpacks the agent bundle into a fresh folder beside it (`bundle/`, as a VM's
startup script does; kept when unpacked from the same archive), starts the agent from there
(`PYTHONPATH` is that folder only, the working folder the node's own) with the same config every
time, and stays as the node's init; it notes its own pid beside the boot file (`init.json`), so an
operator started by hand (spoteval/drill/attach.py) finds the node. `launch_node` starts it, for
the drill and that operator, with the drill's bundle (`agent-bundle.zip` in the drill's folder).
Without `--bundle` the agent runs from this checkout (tests of the startup path).

On Linux this process is a child subreaper, so an episode or model server orphaned by the agent
stays inside the node and dies with it. Elsewhere such orphans may escape (the drill then kills what
it can see).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from spoteval.cli import OneLineParser
from spoteval.record import format_time, utc_now

PACKAGE_ROOT: Final = Path(__file__).resolve().parent.parent.parent
PR_SET_CHILD_SUBREAPER: Final = 36


def node_main(argv: Sequence[str] | None = None) -> int:
    """`python -m spoteval.drill node --config agent.json --boot-file F`: what a startup script does.

    It notes the boot time, then starts the agent in its own process group and stays as the node's
    init: it reaps every process the node leaves behind and exits with the agent's exit code once
    nothing is left. SIGTERM (the provider's notice) reaches the agent through the group; this
    process ignores it (a machine does not stop for a notice).
    """
    parser = OneLineParser(prog="python -m spoteval.drill node")
    parser.add_argument("--config", required=True)
    parser.add_argument("--boot-file", required=True)
    parser.add_argument("--bundle", help="the agent bundle zip to unpack and run from")
    args = parser.parse_args(argv)
    boot = utc_now()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # ignored at the OS level (a Python handler would be reset while this process shuts down)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(args.boot_file).parent.mkdir(parents=True, exist_ok=True)
    _write(Path(args.boot_file), {"boot_time": format_time(boot), "source": "drill"})
    _write(init_file(Path(args.boot_file)), {"pid": os.getpid(), "started": format_time(boot)})
    home = Path(args.boot_file).resolve().parent
    if args.bundle:
        from spoteval.bundle.unpack import unpack

        env = {**os.environ, "PYTHONPATH": str(unpack(args.bundle, home / "bundle"))}
    else:
        env = {**os.environ, "PYTHONPATH": pythonpath()}
    agent = subprocess.Popen(
        [sys.executable, "-m", "spoteval.agent", "--config", args.config],
        env=env,
        cwd=home,
        preexec_fn=_default_sigterm,  # noqa: PLW1509 - the agent must not inherit SIG_IGN-like handlers
    )
    code: int | None = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == agent.pid:
            code = os.waitstatus_to_exitcode(status)
            agent.returncode = code
    return 0 if code is None else (code if code >= 0 else 128 - code)


def _write(path: Path, doc: dict[str, object]) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def init_file(boot_file: Path) -> Path:
    """Where the node's init notes its pid: beside the boot file."""
    return boot_file.with_name("init.json")


def launch_node(
    config: Path,
    folder: Path,
    log_name: str,
    *,
    bundle: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the node's startup path in its own session, its output in `folder/logs/log_name`; the
    node runs from `bundle` (default: the drill's `agent-bundle.zip` beside the node's folder)."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    bundle = bundle or folder.parent / "agent-bundle.zip"
    argv = [sys.executable, "-m", "spoteval.drill", "node", "--config", str(config)]
    argv += ["--boot-file", str(folder / "boot.json")]
    if bundle.is_file():
        argv += ["--bundle", str(bundle)]
    env = {k: v for k, v in os.environ.items() if k not in (extra_env or {})}
    log = open(logs / log_name, "wb")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**env, **(extra_env or {}), "PYTHONPATH": pythonpath()},
        )
    finally:
        log.close()


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pythonpath() -> str:
    parts = [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))
