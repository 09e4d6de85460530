"""`python -m spoteval.agent [run] --config agent.json` and `... manifest --config agent.json FILE.jsonl`.

Exit codes (spoteval/agent/exits.py): 0 the run ended by a notice or a stop rule (or the manifest is
in place); 1 the run could not go on (the model server failed, power off failed); 2 bad input:
config, manifest or a missing command; 75 the store did not answer at start (transient). Bad input
and an unreachable store are reported as one line naming the problem, with nothing written to the
store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from spoteval.agent import exits
from spoteval.agent.config import PYTHON_PLACEHOLDER, AgentConfig, ConfigError, load
from spoteval.manifest import ManifestEntry, dump_manifest, parse_manifest
from spoteval.record import RecordError, RunLayout, utc_now
from spoteval.store import Store, StoreError

PROG = "spot-eval-agent"


class AgentError(Exception):
    """Bad input found before the agent writes anything (one line, exit code 2)."""

    code = exits.BAD_INPUT


class StoreUnreachable(AgentError):
    """The store did not answer before the agent wrote anything (one line, exit code 75: transient)."""

    code = exits.STORE_UNREACHABLE


def open_store(config: AgentConfig) -> Store:
    """Open the store and check that it answers (a listing, which writes nothing)."""
    try:
        store = Store(config.store, config.store_options_with_defaults())
        store.list(RunLayout(config.run_id).prefix + "manifest")
    except StoreError as exc:
        raise StoreUnreachable(f"store {config.store} is unreachable: {exc}") from None
    return store


def _check_command(argv: Sequence[str], key: str) -> None:
    exe = argv[0].replace(PYTHON_PLACEHOLDER, sys.executable)  # the eval env's, else this one
    found = os.access(exe, os.X_OK) if os.sep in exe else shutil.which(exe) is not None
    if not found:
        raise AgentError(f"{key}: command {exe!r} not found or not executable")


def prepare(config: AgentConfig) -> tuple[Store, list[ManifestEntry]]:
    """Every check that can fail on bad input, before anything is written."""
    if config.server.command:
        _check_command(config.server.command, "server.command")
    _check_command(config.episodes.command, "episodes.command")
    store = open_store(config)
    layout = RunLayout(config.run_id)
    try:
        data = store.get(layout.manifest)
    except StoreError as exc:
        raise StoreUnreachable(f"store {config.store} is unreachable: {exc}") from None
    if data is None:
        raise AgentError(
            f"no manifest at {store.join(layout.manifest)}: upload one with "
            f"`python -m spoteval.agent manifest --config FILE manifest.jsonl`"
        )
    try:
        entries = parse_manifest(data.decode("utf-8", errors="replace"))
    except RecordError as exc:
        raise AgentError(f"manifest {store.join(layout.manifest)}: {exc}") from None
    for path, key in ((config.run_spool_dir(), "spool_dir"), (config.run_work_dir(), "work_dir")):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise AgentError(f"{key}: cannot create {path}: {exc.strerror or exc}") from None
        if not os.access(path, os.W_OK):
            raise AgentError(f"{key}: {path} is not writable")
    return store, entries


def upload_manifest(config: AgentConfig, path: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            entries = parse_manifest(f.read())
    except OSError as exc:
        raise AgentError(f"manifest {path}: cannot read: {exc.strerror or exc}") from None
    except RecordError as exc:
        raise AgentError(f"manifest {path}: {exc}") from None
    store = open_store(config)
    layout = RunLayout(config.run_id)
    data = dump_manifest(entries)
    try:
        if store.put_new(layout.manifest, data):
            print(f"{PROG}: manifest with {len(entries)} episodes uploaded to {store.join(layout.manifest)}")
            return 0
        existing = store.get(layout.manifest)
    except StoreError as exc:
        raise StoreUnreachable(f"store {config.store} is unreachable: {exc}") from None
    try:
        same = existing is not None and parse_manifest(existing.decode("utf-8", errors="replace")) == entries
    except RecordError:
        same = False
    if not same:
        raise AgentError(
            f"manifest refused: {store.join(layout.manifest)} already holds a different manifest for run "
            f"{config.run_id} (a run's manifest never changes; use a new run_id)"
        )
    print(f"{PROG}: the same manifest is already at {store.join(layout.manifest)}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (AgentError, exit 2), not the multi-line usage."""

    def error(self, message: str) -> NoReturn:
        raise AgentError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="spot-eval node agent")
    parser.add_argument("command", nargs="?", choices=("run", "manifest"), default="run")
    parser.add_argument("manifest_file", nargs="?", help="manifest .jsonl (manifest command)")
    parser.add_argument("--config", required=True, help="agent.json")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    started_mono, started_wall = time.monotonic(), utc_now()
    try:
        args = _parser().parse_intermixed_args(argv)
        config = load(args.config)
        if args.command == "manifest":
            if not args.manifest_file:
                raise AgentError("manifest: give the manifest file: manifest --config FILE manifest.jsonl")
            return upload_manifest(config, args.manifest_file)
        if args.manifest_file:
            raise AgentError(f"run takes no file argument (got {args.manifest_file!r})")
        store, entries = prepare(config)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exits.BAD_INPUT
    except AgentError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code
    from spoteval.agent.loop import Agent

    agent = Agent(config, store, entries, started_wall=started_wall, started_mono=started_mono)
    return agent.run()


if __name__ == "__main__":
    raise SystemExit(main())
