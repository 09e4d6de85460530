"""inspect-ai (>= 0.3.285) as a harness: one `inspect_ai.eval()` per attempt, in this process.

- The model is inspect's `openai-api` provider: `openai-api/spoteval/{model}` with
  `model_base_url={openai_base_url}` (the server root + `/v1`), the API key from `SPOTEVAL_API_KEY`
  (`none` when unset; vLLM started without `--api-key` takes any).
- The task is what `inspect eval` takes (`/abs/path/file.py@name`, as the runner hands it: see
  spoteval/harness/locate.py; a registry name), or `package.module@name`, a task function in an
  importable module (imported here, called with the task's arguments); the task's
  arguments are `task_args`; options are passed to `inspect_ai.eval()` (`epochs`, `max_tokens`,
  `temperature`, `fail_on_error`, `max_retries`, `timeout`, ...). spot-eval sets `sample_id`,
  `log_dir`, `display` and the model itself, so those options are refused.
- Each sample is handed to the sink from inspect's `on_sample_end` hook, the moment it finishes;
  a sample that ended in an error is not (a later attempt runs it again).
- The outcome comes from the eval log: status `success` with every sample finished is
  `completed`; a failed sample whose transcript ends in a model call that raised (server error,
  refused connection, timeout) is `model_failure`; anything else (an unknown task or sample id,
  bad task arguments, a solver or scorer crash) is `harness_error`. `inspect eval` exits 0 on a
  failed task, so its exit code says nothing.
- Scores: numbers and booleans as they are; inspect's letters C, I, P, N become 1, 0, 0.5, 0 (as
  its `accuracy()` counts them); other strings are kept as categories.
"""

from __future__ import annotations

import importlib
import inspect as pyinspect
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from spoteval.harness.base import (
    COMPLETED,
    HARNESS_ERROR,
    MODEL_FAILURE,
    HarnessError,
    Job,
    Outcome,
    SampleRecord,
    Sink,
    one_line,
)
from spoteval.harness.ids import SampleId, sample_key
from spoteval.harness.taskref import MODULE, split

PROVIDER: Final = "openai-api/spoteval"
RESERVED: Final = frozenset(
    {"tasks", "model", "model_base_url", "sample_id", "log_dir", "display", "task_args"}
)
_LETTERS: Final[Mapping[str, float]] = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_ANSWER_CHARS: Final = 2000

# The sink of the attempt running in this process (inspect's hooks are process-wide).
_current: list[Sink] = []


def _install_hook() -> None:
    from inspect_ai.hooks import Hooks, SampleEnd, hooks

    if getattr(_install_hook, "done", False):
        return

    @hooks(name="spoteval_progress", description="Streams each finished sample to the run record")
    class _Progress(Hooks):
        async def on_sample_end(self, data: SampleEnd) -> None:
            if _current and data.sample.error is None:
                _current[-1](sample_record(data.sample))

    _install_hook.done = True  # type: ignore[attr-defined]


def _module_task(task: str, args: Mapping[str, Any]) -> Any | None:
    """`package.module@name`: the Task its task function makes; None for any other task."""
    ref = split("inspect", task)
    if ref.kind != MODULE:
        return None
    assert ref.module is not None and ref.name is not None
    try:
        module = importlib.import_module(ref.module)
    except Exception as exc:
        raise HarnessError(
            f"inspect task module {ref.module!r} cannot be imported: {one_line(exc)}"
        ) from None
    fn = getattr(module, ref.name, None)
    if not callable(fn):
        raise HarnessError(f"inspect task module {ref.module!r} has no task function {ref.name!r}")
    try:
        return fn(**dict(args))
    except Exception as exc:
        raise HarnessError(f"inspect task {task!r}: {one_line(exc)}") from None


def score_value(value: object) -> object:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _LETTERS.get(value, value)
    return None  # lists and dicts: not a score the report can aggregate


def sample_record(sample: Any) -> SampleRecord:
    """The stored record of one finished inspect sample (an `EvalSample`)."""
    scores: dict[str, object] = {}
    for name, score in (sample.scores or {}).items():
        value = score_value(score.value)
        if value is not None:
            scores[name] = value
    target = sample.target if isinstance(sample.target, str) else list(sample.target)
    working = sample.working_time if sample.working_time is not None else sample.total_time
    return {
        "id": sample.id,
        "key": sample_key(sample.id),
        "epoch": int(sample.epoch),
        "scores": scores,
        "answer": (sample.output.completion or "")[:_ANSWER_CHARS],
        "target": target,
        "model_s": round(float(working or 0.0), 4),
    }


def _model_error(sample: Any) -> str | None:
    """The error of the sample's last model call, when the sample failed on it."""
    for event in reversed(sample.events or []):
        if getattr(event, "event", None) == "model":
            error = getattr(event, "error", None)
            return str(error) if error else None
    return None


class InspectHarness:
    name = "inspect"
    integer_ids = False

    def _check_options(self, options: Mapping[str, Any]) -> None:
        from inspect_ai import eval as inspect_eval
        from inspect_ai.model import GenerateConfig

        bad = sorted(set(options) & RESERVED)
        if bad:
            raise HarnessError(f"inspect option {bad[0]!r} is set by spot-eval; remove it")
        known = set(pyinspect.signature(inspect_eval).parameters) | set(GenerateConfig.model_fields)
        unknown = sorted(set(options) - known)
        if unknown:
            raise HarnessError(f"inspect has no eval() option {unknown[0]!r}")

    def list_samples(self, task: str, args: Mapping[str, Any], options: Mapping[str, Any]) -> list[SampleId]:
        from inspect_ai._eval.loader import load_tasks

        made = _module_task(task, args)
        try:
            tasks = [made] if made is not None else load_tasks([task], dict(args))
        except Exception as exc:
            raise HarnessError(f"inspect task {task!r}: {one_line(exc)}") from None
        if len(tasks) != 1:
            raise HarnessError(f"inspect task {task!r} names {len(tasks)} tasks; name exactly one")
        ids = [s.id for s in tasks[0].dataset]
        if any(i is None for i in ids):
            ids = list(range(1, len(ids) + 1))  # inspect numbers samples without ids from 1
        return [i for i in ids if i is not None]

    def run(self, job: Job, sink: Sink) -> Outcome:
        t0 = time.monotonic()
        os.environ.setdefault("SPOTEVAL_API_KEY", "none")
        from inspect_ai import eval as inspect_eval

        self._check_options(job.options)
        _install_hook()
        epochs = _epochs(job.options)
        todo = [s for s in job.samples if len(job.done.get(sample_key(s), ())) < epochs]
        records: dict[str, list[SampleRecord]] = {k: list(v) for k, v in job.done.items()}
        first: list[float] = []

        def on_sample(record: SampleRecord) -> None:
            if not first:
                first.append(time.monotonic() - float(record.get("model_s") or 0.0))
            sink(record)
            records.setdefault(str(record["key"]), []).append(record)

        outcome = Outcome(COMPLETED, ran=len(todo))
        if todo:
            made = _module_task(job.task, job.args)
            _current.append(on_sample)
            try:
                logs = inspect_eval(
                    made if made is not None else job.task,
                    model=f"{PROVIDER}/{job.model}",
                    model_base_url=job.openai_base_url,
                    task_args={} if made is not None else dict(job.args),
                    sample_id=list(todo),
                    log_dir=job.log_dir,
                    display="none",
                    **{"log_level": "warning", **dict(job.options)},
                )
            except Exception as exc:
                return Outcome(HARNESS_ERROR, f"inspect: {one_line(exc)}", ran=0)
            finally:
                _current.pop()
            outcome = classify(logs)
        outcome.startup_s = round((first[0] if first else time.monotonic()) - t0, 3)
        outcome.ran = len(todo)
        outcome.model_s = round(
            sum(float(r.get("model_s") or 0) for k, rs in records.items() if k not in job.done for r in rs), 4
        )
        if outcome.outcome == COMPLETED:
            missing = [s for s in job.samples if len(records.get(sample_key(s), ())) < epochs]
            if missing:
                return Outcome(
                    HARNESS_ERROR, f"inspect finished without sample {missing[0]!r}", ran=len(todo)
                )
            outcome.samples = [r for s in job.samples for r in records[sample_key(s)][:epochs]]
        return outcome


def classify(logs: Sequence[Any]) -> Outcome:
    """The outcome of an `inspect_ai.eval()` from its log (one task).

    The task's error is the first sample's that failed (inspect cancels the others, whose model
    calls then end as cancelled): that sample's transcript says whose failure it was.
    """
    if len(logs) != 1:
        return Outcome(HARNESS_ERROR, f"inspect returned {len(logs)} logs for one task")
    log = logs[0]
    if log.status == "success":
        return Outcome(COMPLETED)
    failed = [s for s in log.samples or [] if s.error is not None]
    message = log.error.message if log.error is not None else None
    first = next((s for s in failed if s.error.message == message), failed[0] if failed else None)
    if first is not None:
        model_error = _model_error(first)
        if model_error is not None:
            reason = f"sample {first.id!r}: model call failed: {one_line(model_error)}"
            return Outcome(MODEL_FAILURE, reason)
        return Outcome(HARNESS_ERROR, f"sample {first.id!r}: {one_line(first.error.message)}")
    if message is not None:
        return Outcome(HARNESS_ERROR, f"inspect task {log.status}: {one_line(message)}")
    return Outcome(HARNESS_ERROR, f"inspect task ended with status {log.status!r}")


def _epochs(options: Mapping[str, Any]) -> int:
    value = options.get("epochs", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HarnessError(f"inspect option epochs={value!r}: give a whole number >= 1")
    return value
