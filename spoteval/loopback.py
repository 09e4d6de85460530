"""Servers on loopback as child processes: launch one on a free port of 127.0.0.1, wait until it
answers, stop it with its whole process group.

The moto server (S3 and EC2) is launched here for the drill's `--store s3` (spoteval/drill/) and for
the tests (tests/servers.py, which also launches Azurite and the GCS emulator through `launch`).
Nothing here reaches beyond loopback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LaunchError(RuntimeError):
    """The server exited (`exited` is its exit code) or did not answer in time (`exited` is None)."""

    def __init__(self, message: str, *, exited: int | None, log: str) -> None:
        super().__init__(message)
        self.exited = exited
        self.log = log


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    workdir: str
    log_path: Path
    owns_workdir: bool = True  # a temporary folder of its own, removed by stop()
    env: dict[str, str] = field(default_factory=dict)
    log_file: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        if self.log_file is not None:
            self.log_file.close()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _die_with_parent() -> None:
    """In the child, before exec: end with the parent process, even if it is killed (Linux only)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def launch(
    name: str,
    argv: Sequence[str],
    port: int,
    probe: str,
    *,
    timeout: float = 60.0,
    workdir: Path | None = None,
    log_name: str = "server.log",
    die_with_parent: bool = True,
) -> Server:
    """Start `argv` in its own session (in `workdir`, else a temporary folder it owns), its output in
    `log_name` there, and wait until `http://127.0.0.1:{port}{probe}` answers (any HTTP status)."""
    owned = workdir is None
    where = tempfile.mkdtemp(prefix=f"spoteval-{name}-") if workdir is None else str(workdir)
    log_path = Path(where, log_name)
    log = open(log_path, "wb")  # noqa: SIM115 - kept open for the child's lifetime
    process = subprocess.Popen(
        list(argv),
        cwd=where if owned else None,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 - only prctl
    )
    server = Server(name, port, process, where, log_path, owned, log_file=log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = server.log()
            server.stop()
            raise LaunchError(
                f"{name} exited with {process.returncode}: {output[-2000:]}",
                exited=process.returncode,
                log=output,
            )
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=2).close()
            return server
        except urllib.error.HTTPError:
            return server  # it answers, even if with an error status
        except OSError:
            time.sleep(0.1)
    output = server.log()
    server.stop()
    raise LaunchError(
        f"{name} did not answer on port {port} within {timeout:g} s: {output[-2000:]}",
        exited=None,
        log=output,
    )


# --- moto ---------------------------------------------------------------------------------------


def moto_command() -> str | None:
    """The moto server's executable: beside this Python (a venv), else on PATH; None without one."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    return shutil.which("moto_server")


def start_moto(
    *, workdir: Path | None = None, log_name: str = "server.log", die_with_parent: bool = True
) -> Server:
    """moto in server mode on loopback: S3 and EC2 (spot instances, stop/start, spot price history).
    LaunchError when it is not installed, exits, or does not answer within 60 s."""
    command = moto_command()
    if command is None:
        raise LaunchError(
            "the moto server is not installed (pip install 'moto[server]')", exited=None, log=""
        )
    port = free_port()
    return launch(
        "moto",
        [command, "-H", "127.0.0.1", "-p", str(port)],
        port,
        "/moto-api/",
        workdir=workdir,
        log_name=log_name,
        die_with_parent=die_with_parent,
    )


def s3_options(server: Server, key: str) -> dict[str, Any]:
    """Store options for S3 on the moto server (moto takes any key)."""
    return {
        "endpoint": server.url,
        "region": "us-east-1",
        "access_key_id": key,
        "secret_access_key": key,
        "allow_http": True,
    }
