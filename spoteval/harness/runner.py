"""The shard runner: one episode = one attempt at one shard of a task, run on the GPU node.

    python -m spoteval.harness run --harness inspect|lm-eval --task TASK --model NAME
        --model-url {model_url} --output {output} --episode {episode_id}
        [--args JSON] [--options JSON] [--samples JSON] [--store URL] [--run-id ID]
    python -m spoteval.harness list --harness inspect|lm-eval --task TASK [--args JSON] [--options JSON]

- The task: the one syntax of spoteval/harness/taskref.py (`PATH.py@TASK`, `package.module@TASK`,
  lm-eval `FOLDER@TASK`); a relative path is looked up from the working folder, then from the
  bundle's root. The harness runs with the task's own folder as its working directory.

- The shard's samples: `--samples`, else `samples` in `SPOTEVAL_EPISODE_PARAMS` (the manifest
  entry the agent passes), else every sample of the task.
- The store and run: `--store` / `SPOTEVAL_STORE` (with `SPOTEVAL_STORE_OPTIONS`, JSON) and
  `--run-id` / `SPOTEVAL_RUN_ID`. The node: `SPOTEVAL_NODE` (else the host name). The local
  work folder: `SPOTEVAL_WORK_DIR` (else the system's temporary folder).
- `{openai_base_url}` is `{model_url}` + `/v1` unless `--openai-base-url` is given.

`list` prints the task's sample ids as a JSON list (what the stack check and the drill plan shards
from, run from the bundle as built); exit 3 with the harness's reason when the task does not load.

Samples already in the store (an earlier attempt, on any node) are not run again; each sample
this attempt finishes is written there as it finishes; the harness's logs go there at the end
(progress.py). Exit codes, the episode contract:

    0  completed: every sample has a record; `--output` holds the result (format below)
    1  model_failure: a model call failed (the reason is the last line on stderr)
    2  bad input found before the harness started (unknown harness, bad sample ids, no store)
    3  harness_error: the harness failed for a reason that is not the model's

The result (`--output`, which the agent stores under `output` in results/{episode_id}.json):
`{"format": 1, "harness", "task", "model", "samples": [{"id", "key", "epoch", "scores",
"answer", "target", "model_s"}, ...], "from_store": N, "ran": N, "startup_s", "model_s",
"logs": [store keys]}`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from spoteval import harness as registry
from spoteval.cli import OneLineParser
from spoteval.harness.base import (
    COMPLETED,
    HARNESS_ERROR,
    MODEL_FAILURE,
    Harness,
    HarnessError,
    Job,
    Outcome,
    SampleRecord,
    one_line,
)
from spoteval.harness.hold import Hold, hold_from
from spoteval.harness.ids import SampleId, SampleIdError, parse_samples, sample_key, sample_keys
from spoteval.harness.locate import enter, locate
from spoteval.harness.progress import Progress, ShardKeys, attempt_token
from spoteval.record import RecordError, check_id, utc_now
from spoteval.store import Store, StoreError

EXIT_COMPLETED: Final = 0
EXIT_MODEL_FAILURE: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_HARNESS_ERROR: Final = 3
RESULT_FORMAT: Final = 1


class BadInput(Exception):
    """One line, exit code 2: nothing was run."""


class _Terminated(BaseException):
    """SIGTERM: leave through the `finally` blocks (the logs go to the store), then die by it."""


def _json_arg(text: str | None, what: str, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        raise BadInput(f"{what} must be a JSON {'object' if kind is dict else 'list'}")
    return value


def _samples(args: argparse.Namespace, env: Mapping[str, str]) -> list[SampleId] | None:
    raw: object = None
    if args.samples is not None:
        raw = _json_arg(args.samples, "--samples", list)
    elif env.get("SPOTEVAL_EPISODE_PARAMS"):
        params = _json_arg(env["SPOTEVAL_EPISODE_PARAMS"], "SPOTEVAL_EPISODE_PARAMS", dict)
        raw = params.get("samples")
        if raw is not None and not isinstance(raw, list):
            raise BadInput("SPOTEVAL_EPISODE_PARAMS: samples must be a list")
    if raw is None:
        return None
    try:
        return parse_samples(raw)  # type: ignore[arg-type]
    except SampleIdError as exc:
        raise BadInput(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m spoteval.harness run", description=__doc__.splitlines()[0])
    p.add_argument("--harness", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--model", required=True, help="the name the model server serves")
    p.add_argument("--model-url", required=True, help="the model server's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--openai-base-url", help="default: MODEL_URL/v1")
    p.add_argument("--output", required=True, help="where the result JSON goes")
    p.add_argument("--episode", required=True, help="the episode id (the shard)")
    p.add_argument("--args", help="the task's arguments, a JSON object")
    p.add_argument("--options", help="the harness's options, a JSON object")
    p.add_argument("--samples", help="the shard's sample ids, a JSON list")
    p.add_argument("--store", help="default: $SPOTEVAL_STORE")
    p.add_argument("--run-id", help="default: $SPOTEVAL_RUN_ID")
    return p


def _terminated(exc: BaseException) -> bool:
    """SIGTERM's exception, alone or inside an exception group (a harness's task group)."""
    if isinstance(exc, _Terminated):
        return True
    return any(_terminated(e) for e in getattr(exc, "exceptions", ()) if isinstance(e, BaseException))


def _attempt(
    harness: Harness, args: argparse.Namespace, job: Job, progress: Progress, hold: Hold | None
) -> Outcome:
    """One run of the harness on the shard; every failure that is not the model's is a harness_error."""
    try:
        located = locate(args.harness, args.task, job.options)
        enter(located)
        samples = job.samples
        if not samples:
            samples = harness.list_samples(located.task, job.args, located.options)
        parse_samples(samples)

        def sink(record: SampleRecord) -> None:
            progress.record(record)
            if hold is not None:
                hold.check()

        return harness.run(replace(job, task=located.task, options=located.options, samples=samples), sink)
    except (HarnessError, SampleIdError) as exc:
        return Outcome(HARNESS_ERROR, str(exc))
    except Exception as exc:  # a crash of the harness outside the model: never the model's fault
        return Outcome(HARNESS_ERROR, f"{args.harness} crashed: {one_line(exc)}")


def run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    started_mono = time.monotonic()
    env = dict(os.environ if env is None else env)
    args = parser().parse_args(argv)
    try:
        harness = registry.get(args.harness)
        check_id(args.episode, "episode id")
        task_args = _json_arg(args.args, "--args", dict)
        options = _json_arg(args.options, "--options", dict)
        samples = _samples(args, env)
        store_url = args.store or env.get("SPOTEVAL_STORE")
        run_id = args.run_id or env.get("SPOTEVAL_RUN_ID")
        if not store_url or not run_id:
            raise BadInput(
                "no store or run id: give --store and --run-id, or SPOTEVAL_STORE and SPOTEVAL_RUN_ID"
            )
        store_options = _json_arg(env.get("SPOTEVAL_STORE_OPTIONS"), "SPOTEVAL_STORE_OPTIONS", dict)
        store = Store(store_url, store_options)
        keys = ShardKeys(check_id(run_id, "run id"), args.episode)
        progress = Progress(store, keys)
        finished = progress.finished()
    except (HarnessError, BadInput, RecordError, StoreError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    output = os.path.abspath(args.output)
    node = env.get("SPOTEVAL_NODE") or socket.gethostname() or "node"
    token = attempt_token(utc_now(), node)
    work_root = os.path.join(env.get("SPOTEVAL_WORK_DIR") or tempfile.gettempdir(), "spoteval-harness")
    shard_root = os.path.abspath(os.path.join(work_root, run_id, args.episode))
    log_dir = os.path.join(shard_root, token, "logs")
    os.makedirs(log_dir, exist_ok=True)
    logs = progress.sweep(shard_root, token)
    job = Job(
        task=args.task,
        model=args.model,
        openai_base_url=args.openai_base_url or args.model_url.rstrip("/") + "/v1",
        samples=samples or [],
        done=finished,
        log_dir=log_dir,
        args=task_args,
        options=options,
    )

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: object) -> None:
        raise _Terminated()

    signal.signal(signal.SIGTERM, on_term)
    pre_s = time.monotonic() - started_mono
    try:
        outcome = _attempt(harness, args, job, progress, hold_from(env, store, keys))
    except BaseException as exc:
        if not _terminated(exc):
            raise
        with contextlib.suppress(Exception):
            progress.upload_logs(token, log_dir)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return 128 + signal.SIGTERM  # pragma: no cover - the signal ends the process first
    finally:
        signal.signal(signal.SIGTERM, previous)
    with contextlib.suppress(StoreError, OSError):
        logs += progress.upload_logs(token, log_dir)
    if outcome.outcome != COMPLETED:
        print(f"{outcome.outcome}: {outcome.reason}", file=sys.stderr)
        return EXIT_MODEL_FAILURE if outcome.outcome == MODEL_FAILURE else EXIT_HARNESS_ERROR
    shard = [s["id"] for s in outcome.samples] if not job.samples else list(job.samples)
    result = {
        "format": RESULT_FORMAT,
        "harness": args.harness,
        "task": args.task,
        "model": args.model,
        "samples": outcome.samples,
        "from_store": sum(1 for s in dict.fromkeys(shard) if sample_key(s) in finished),
        "ran": outcome.ran,
        "startup_s": round(pre_s + (outcome.startup_s or 0.0), 3),
        "model_s": outcome.model_s,
        "logs": sorted(logs),
    }
    tmp = output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, sort_keys=True, default=str)
    os.replace(tmp, output)
    return EXIT_COMPLETED


def list_task(argv: Sequence[str]) -> int:
    """`list`: the task's sample ids as a JSON list on stdout (exit 3 with the reason otherwise)."""
    p = OneLineParser(prog="python -m spoteval.harness list")
    p.add_argument("--harness", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--args", help="the task's arguments, a JSON object")
    p.add_argument("--options", help="the harness's options, a JSON object")
    args = p.parse_args(argv)
    try:
        harness = registry.get(args.harness)
        task_args = _json_arg(args.args, "--args", dict)
        options = _json_arg(args.options, "--options", dict)
    except (HarnessError, BadInput) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        located = locate(args.harness, args.task, options)
        enter(located)
        ids = harness.list_samples(located.task, task_args, located.options)
        sample_keys(ids)
    except (HarnessError, SampleIdError) as exc:
        print(f"harness_error: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    except Exception as exc:
        print(f"harness_error: {args.harness} crashed: {one_line(exc)}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    print(json.dumps(ids))
    return EXIT_COMPLETED


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("run", "list"):
        print(
            "usage: python -m spoteval.harness run|list --harness NAME --task TASK ... (see --help)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    return run(args[1:]) if args[0] == "run" else list_task(args[1:])
