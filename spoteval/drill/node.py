"""The drill node's startup path: what the startup script is on a real node.

`python -m spoteval.drill node --config agent.json --boot-file F --bundle ZIP` notes the boot time in
the agent's boot file, unpacks the agent bundle into a fresh folder beside it (`bundle/`, replaced
at every start, as a VM's startup script does), starts the agent from there (`PYTHONPATH` is that
folder only, the working folder the node's own) with the same config every time, and stays as the
node's init. Without `--bundle` the agent runs from this checkout (tests of the startup path).

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
from collections.abc import Sequence
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
    tmp = f"{args.boot_file}.tmp"
    Path(tmp).write_text(json.dumps({"boot_time": format_time(boot), "source": "drill"}))
    os.replace(tmp, args.boot_file)
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


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pythonpath() -> str:
    parts = [str(PACKAGE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m spoteval.drill node ...` (the node's startup path; the drill itself is scripts/drill.py)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "node":
        print(
            "python -m spoteval.drill: the only command is `node --config agent.json --boot-file FILE`",
            file=sys.stderr,
        )
        return 2
    return node_main(args[1:])
