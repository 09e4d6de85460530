"""Child processes: the model server and one subprocess per episode attempt, each in its own group.

An attempt's outcome:

- exit 0 and a JSON file at `{output}` -> `completed` (the file's content is the output);
- exit 3 (the harness failed for reasons that are not the model's: bad arguments, an unknown
  sample, a crash before the model), exit 2 (bad arguments, as argparse and shells report them),
  or a command that cannot be started -> `harness_error`, never counted against the model;
- any other exit, exit 0 without usable output, or killed at `timeout_s` -> `model_failure`;
- stopped by the agent because the capacity is going away (notice, or a stop rule ending the run)
  -> `interrupted`: SIGTERM first (a harness can save its state), SIGKILL after a grace.

A failure that is not the agent's own kill is held for `SETTLE_S` before it becomes final: when a
node shuts down, the OS may signal the episodes (and the model server) at the same moment as the
agent, and an episode that died that way must be `interrupted`, not a model failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from spoteval.agent.config import EpisodesConfig, ServerConfig, substitute
from spoteval.agent.procgroup import (
    NOTED_FILE,
    GroupEnd,
    end_group,
    members,
    remove_noted,
    shm_held,
    write_noted,
)
from spoteval.manifest import ManifestEntry
from spoteval.record import utc_now

SETTLE_S: Final = 1.0
_ERROR_TAIL: Final = 2000

KILL_TIMEOUT: Final = "timeout"
#: Exit codes that say the episode command failed for reasons that are not the model's.
HARNESS_ERROR_EXITS: Final = frozenset({2, 3})
#: Outcomes that count against `max_attempts` (an interrupted attempt never does).
FAILURES: Final = frozenset({"model_failure", "harness_error"})
KILL_CAPACITY: Final = "capacity"


@dataclass
class Running:
    """One attempt in flight (owned by the agent's loop; the waiter thread only reads `proc`)."""

    episode_id: str
    dispatch: int
    started: datetime  # stamped just before the process is made
    started_mono: float
    output_path: str
    log_path: str
    timeout_at: float
    proc: subprocess.Popen[bytes] | None = None
    kill_reason: str | None = None
    term_at: float | None = None  # while stopping: when it gets SIGTERM (then `kill_at`)
    kill_at: float | None = None  # while stopping: when it is SIGKILLed
    returncode: int | None = None
    ended: datetime | None = None
    ended_mono: float = 0.0
    spawn_error: str | None = None
    spawned: datetime | None = None  # once its process runs (the command exec'd: `Popen` returned)
    extra: dict[str, Any] = field(default_factory=dict)


def spawn(
    config: EpisodesConfig,
    run: Running,
    model_url: str,
    env: Mapping[str, str],
    on_exit: Callable[[Running], None],
    *,
    python: str = sys.executable,
    cwd: str | None = None,
    refused: str | None = None,
) -> None:
    """Start the attempt in its own process group; `on_exit(run)` is called from a thread when it ends.

    `python` fills `{python}` and `cwd` is where the attempt starts (the eval environment's, see
    agent/evalenv.py); `refused` says why this attempt cannot start at all (a failed requirements
    install): it ends at once as a harness error carrying that reason.
    """
    values = {
        "episode_id": run.episode_id,
        "model_url": model_url,
        "openai_base_url": openai_base_url(model_url),
        "output": run.output_path,
        "python": python,
    }
    argv = substitute(config.command, values)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run.output_path)
    try:
        if refused is not None:
            raise _Refused(refused)
        with open(run.log_path, "wb") as log:
            run.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )
    except _Refused as exc:
        run.spawn_error = str(exc)
        run.returncode = 3
        run.ended, run.ended_mono = utc_now(), time.monotonic()
        on_exit(run)
        return
    except OSError as exc:
        run.spawn_error = f"cannot start episode command {argv[0]!r}: {exc.strerror or exc}"
        run.returncode = 127
        run.ended, run.ended_mono = utc_now(), time.monotonic()
        on_exit(run)
        return
    run.spawned = utc_now()
    proc = run.proc

    def wait() -> None:
        run.returncode = proc.wait()
        run.ended, run.ended_mono = utc_now(), time.monotonic()
        on_exit(run)

    threading.Thread(target=wait, name=f"episode-{run.episode_id}", daemon=True).start()


class _Refused(Exception):
    """The attempt cannot start (spawn's `refused`)."""


def terminate(run: Running, reason: str, grace_s: float, now: float) -> None:
    """SIGTERM the attempt's process group (a harness can save its state), SIGKILL it `grace_s`
    later (see `kill`); the first reason given is kept."""
    if run.kill_reason is None:
        run.kill_reason = reason
    run.term_at = None
    run.kill_at = now + grace_s if run.kill_at is None else min(run.kill_at, now + grace_s)
    proc = run.proc
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)


def kill(run: Running, reason: str) -> None:
    """SIGKILL the attempt's process group (once); the first reason given is kept."""
    if run.kill_reason is None:
        run.kill_reason = reason
    proc = run.proc
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def read_output(path: str) -> tuple[Any, str | None]:
    """(output, error): the episode's JSON result, or why there is none."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, f"exited 0 but wrote no result file at {path}"
    except OSError as exc:
        return None, f"cannot read result file {path}: {exc.strerror or exc}"
    try:
        output = json.loads(data)
    except ValueError as exc:
        return None, f"result file is not JSON: {exc}"
    if output is None:
        return None, "result file holds JSON null"
    return output, None


def log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _ERROR_TAIL))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Ended:
    outcome: str  # completed | model_failure | harness_error | interrupted
    output: Any = None
    error: str | None = None
    settle: bool = False  # a failure not caused by the agent: hold it for SETTLE_S


def classify(run: Running, timeout_s: float) -> Ended:
    """The outcome of an ended attempt (pure apart from reading its output and log files)."""
    if run.kill_reason == KILL_CAPACITY:
        return Ended("interrupted", error="killed by the agent: the capacity is going away")
    if run.kill_reason == KILL_TIMEOUT:
        return Ended("model_failure", error=f"timed out after {timeout_s:g} s")
    if run.spawn_error is not None:
        return Ended("harness_error", error=run.spawn_error)
    code = run.returncode
    if code == 0:
        output, error = read_output(run.output_path)
        if error is None:
            return Ended("completed", output=output)
        return Ended("model_failure", error=error, settle=True)
    tail = log_tail(run.log_path)
    if code is not None and code < 0:
        what = f"killed by signal {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
    else:
        what = f"exited with {code}"
    outcome = "harness_error" if code in HARNESS_ERROR_EXITS else "model_failure"
    return Ended(outcome, error=f"{what}: {tail}" if tail else what, settle=True)


#: Signals of a shutdown (an exit of 128+N is how shells report death by signal N).
SHUTDOWN_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})


def during_shutdown(run: Running, ended: Ended, *, server_gone: bool) -> Ended:
    """A failure seen around a notice: the shutdown's doing, or the episode's own?

    Interrupted when the episode died by a signal the agent did not send (or exited 128+N for
    SIGTERM, SIGKILL, SIGINT, SIGHUP, as shells report it): the OS stopping every process;
    or when the model server is gone or not answering. A plain failure of an episode that
    ran on after the notice stays a model failure.
    """
    code = run.returncode
    by_signal = code is not None and (code < 0 or code - 128 in SHUTDOWN_SIGNALS)
    if by_signal or server_gone:
        return Ended("interrupted", error=f"ended during shutdown: {ended.error}")
    return ended


def openai_base_url(model_url: str) -> str:
    """The OpenAI-compatible base URL of a model server whose root is `model_url`."""
    return model_url.rstrip("/") + "/v1"


def episode_env(
    base: Mapping[str, str],
    run_id: str,
    run: Running,
    entry: ManifestEntry,
    model_url: str,
    *,
    place: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of an attempt: the agent's, plus what the episode needs to know.

    `place` adds the store, its options, the node and the work folder (`SPOTEVAL_STORE`,
    `SPOTEVAL_STORE_OPTIONS`, `SPOTEVAL_NODE`, `SPOTEVAL_WORK_DIR`), which a harness shard needs to
    stream its finished samples to the run record and resume from there.
    """
    return {
        **base,
        **(place or {}),
        "SPOTEVAL_RUN_ID": run_id,
        "SPOTEVAL_EPISODE_ID": run.episode_id,
        "SPOTEVAL_EPISODE_PARAMS": json.dumps(dict(entry.params), sort_keys=True),
        "SPOTEVAL_MODEL_URL": model_url,
        "SPOTEVAL_OPENAI_BASE_URL": openai_base_url(model_url),
        "SPOTEVAL_OUTPUT": run.output_path,
    }


def cleanup(run: Running) -> None:
    for path in (run.output_path, run.log_path):
        with contextlib.suppress(OSError):
            os.unlink(path)


# --- the model server ---------------------------------------------------------------------------


class ModelServer:
    """The model server as a child process group (or an external one when no command is given).

    `stop()` ends the whole group (spoteval/agent/procgroup.py): the processes the server spawned
    too (vLLM's engine core and worker), also when the server itself has already died, and the
    shared memory they held (noted at `note_shm()` while it ran, and again at the stop)."""

    def __init__(self, config: ServerConfig, log_path: str, env: Mapping[str, str]) -> None:
        self.config = config
        self.log_path = log_path
        self.env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_mono: float | None = None
        self.shm: set[str] = set()
        self.last_end: GroupEnd | None = None
        self.noted_path = os.path.join(os.path.dirname(log_path), NOTED_FILE)
        self.left_behind: list[str] = []  # segments an earlier server on this node left (removed)

    def start(self) -> None:
        if not self.config.command:
            return
        self.left_behind = remove_noted(self.noted_path)  # an earlier agent killed mid-stop
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    list(self.config.command),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerError(
                    f"server.command: cannot start {self.config.command[0]!r}: {exc.strerror or exc}"
                ) from None
        self.started_mono = time.monotonic()
        self.shm = set()

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether the health URL answers 2xx; a reply that is not HTTP raises (the prober logs it)."""
        try:
            with urllib.request.urlopen(self.config.health_url, timeout=timeout) as resp:
                return bool(200 <= resp.status < 300)
        except (urllib.error.URLError, OSError):
            return False

    def note_shm(self) -> None:
        """Remember the shared memory the server's processes hold now (removed at the stop)."""
        proc = self.proc
        if proc is not None:  # a new set, never changed in place: the stop may be reading the old one
            found = self.shm | shm_held(members(proc.pid))
            if found != self.shm:
                write_noted(self.noted_path, found)
            self.shm = found

    def stop(self, grace_s: float = 5.0) -> GroupEnd | None:
        """End the server's process group (SIGTERM, SIGKILL after `grace_s`) and its shared memory."""
        proc = self.proc
        if proc is None:
            return None
        end = end_group(proc.pid, grace_s, noted=self.shm, leader=proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        self.shm = set()
        if not end.left:
            remove_noted(self.noted_path)
        if end.members or end.shm_removed:
            self.last_end = end
        return end

    def log_tail(self) -> str:
        return log_tail(self.log_path)


class ServerError(Exception):
    """The model server cannot start or did not become healthy."""
