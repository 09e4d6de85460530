"""The drill's options for a user's own eval (`--task`, `--workdir`, `--requirements`, ...): added to
the drill command's parser (scripts/drill.py) and read into an `OwnEval` (spoteval/drill/config.py)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from spoteval.drill.config import OwnEval
from spoteval.harness.ids import SampleIdError, parse_samples


class OptionError(Exception):
    """An option that does not parse (one line naming it)."""


def add_own_eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", help="with --harness: PATH.py@TASK, package.module@TASK, lm-eval FOLDER@TASK")
    p.add_argument("--task-args", help="with --harness: the task's arguments, a JSON object")
    p.add_argument("--options", help="with --harness: the harness's options, a JSON object")
    p.add_argument("--samples", help="with --harness: the first N samples, or a JSON list of ids")
    p.add_argument("--shard-size", type=int, help="with --harness: samples per shard (default: chosen)")
    p.add_argument("--startup-s", type=float, help="with --harness: start-up per shard, for the plan")
    p.add_argument("--sample-s", type=float, help="with --harness: time per sample, for the plan")
    p.add_argument("--timing-from", help="with --harness: an earlier drill's folder to plan shards from")
    p.add_argument("--workdir", help="your eval project's folder (default: the task's folder)")
    reqs = p.add_mutually_exclusive_group()
    reqs.add_argument("--requirements", help="a requirements file in the eval project, installed on the node")
    reqs.add_argument(
        "--requirement", action="append", metavar="REQ", help="a requirement to install on the node (repeat)"
    )
    p.add_argument("--exclude", action="append", default=[], help="a .gitignore-style pattern not to ship")
    p.add_argument(
        "--ship-credential", action="append", default=[], metavar="PATH", help="ship this credential file"
    )


def _json(text: str | None, option: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{option}: not JSON: {exc}") from None
    if not isinstance(value, kind):
        raise OptionError(f"{option}: must be a JSON {'object' if kind is dict else 'list'}")
    return value


def _samples(text: str | None) -> tuple[Any, ...] | int | None:
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    ids = _json(text, "--samples", list)
    try:
        return tuple(parse_samples(ids))
    except SampleIdError as exc:
        raise OptionError(f"--samples: {exc}") from None


def command_argv(text: str | None, option: str) -> tuple[str, ...] | None:
    """A command option's words (`--eval-command`, `--server-command`), split as a shell would."""
    if text is None:
        return None
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise OptionError(f"{option}: {exc}") from None
    if not argv:
        raise OptionError(f"{option}: empty command")
    return argv


def own_eval(args: argparse.Namespace) -> OwnEval:
    requirements: str | tuple[str, ...] | None = args.requirements
    if args.requirement:
        requirements = tuple(args.requirement)
    return OwnEval(
        task=args.task,
        workdir=args.workdir,
        requirements=requirements,
        excludes=tuple(args.exclude),
        ship_credentials=tuple(args.ship_credential),
        task_args=_json(args.task_args, "--task-args", dict) or {},
        options=_json(args.options, "--options", dict) or {},
        samples=_samples(args.samples),
        shard_size=args.shard_size,
        startup_s=args.startup_s,
        sample_s=args.sample_s,
        timing_from=Path(args.timing_from) if args.timing_from else None,
    )
