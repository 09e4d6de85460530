"""lm-evaluation-harness (lm-eval >= 0.4.13, `lm-eval[api]`) as a harness, through its Python API.

- Tasks come from `TaskManager(include_path=..., include_defaults=False)`: only the folder the user
  names is indexed (the CLI spends about 13 s indexing every bundled task on each call). Options:
  `include_path` (a folder of task YAML files; the runner gives it absolute, from the task's
  `FOLDER@TASK`: spoteval/harness/locate.py), `include_defaults` (true to also index lm-eval's
  bundled tasks), `chat`
  (true: `local-chat-completions` with the chat template applied; default `local-completions`),
  `max_retries`, `timeout`, `num_concurrent`, `eos_string` (model arguments); any other option
  goes to `lm_eval.simple_evaluate()` (`num_fewshot`, `gen_kwargs`, `random_seed`, ...). The
  task's arguments go to its `metadata`.
- Sample ids are lm-eval's document indices in the evaluation split (its `--samples`), integers,
  in any order and with gaps. lm-eval numbers the documents of a `samples` run by their position
  among the selected ones (`enumerate(x for i, x in enumerate(eval_docs) if i in samples)` in
  `Task.doc_iterator`, 0.4.13) and maps them back for its log through the list it was given:
  spot-eval gives that list in index order and maps each request's position back to its document
  index, so a shard of documents 5-9 stores document 5 under `5` (and `[9, 2, 5]` stores each under
  its own), and resume skips exactly the stored ones.
- The model is `{openai_base_url}/completions` (or `/chat/completions`) with `model={model}` and
  `tokenizer_backend=None`, so no tokenizer is downloaded. Run with `HF_HUB_OFFLINE=1` and
  `HF_DATASETS_OFFLINE=1` (the runner sets both unless they are set).
- lm-eval scores a run only at its end and writes nothing before. So spot-eval wraps the model:
  each document's requests go to the server one document at a time, and the responses are handed
  to the sink (the store) as each document finishes. A later attempt runs the whole shard again
  through lm-eval, but documents already in the store are answered from there without a model
  call: only the rest cost model time, and the scores come from lm-eval's own metrics.
- The outcome: an exception out of a model call (after lm-eval's own retries) is `model_failure`;
  any other exception (unknown task, document index out of range, bad option) is
  `harness_error`; a run that returns without a score for every document is `harness_error`.
"""

from __future__ import annotations

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

MODEL_OPTIONS: Final = frozenset({"max_retries", "timeout", "num_concurrent", "eos_string"})
OWN_OPTIONS: Final = frozenset({"include_path", "include_defaults", "chat"})
RESERVED: Final = frozenset(
    {"model", "model_args", "tasks", "samples", "limit", "task_manager", "log_samples", "metadata"}
)


class ModelCallError(Exception):
    """A model call failed (raised through lm-eval so the shard is a model failure)."""


def _task_manager(options: Mapping[str, Any]) -> Any:
    from lm_eval.tasks import TaskManager

    include = options.get("include_path")
    defaults = bool(options.get("include_defaults", False))
    if include is None and not defaults:
        raise HarnessError("lm-eval needs the option include_path (a folder of task YAML files)")
    if include is not None:
        if not isinstance(include, str) or not os.path.isdir(include):
            raise HarnessError(f"lm-eval include_path {include!r} is not a folder")
        include = os.path.abspath(include)
    return TaskManager(include_path=include, include_defaults=defaults)


def _load_task(name: str, options: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
    manager = _task_manager(options)
    if name not in manager.all_tasks:
        raise HarnessError(f"lm-eval task {name!r} does not exist in the include_path")
    try:
        loaded = manager.load([name])
    except Exception as exc:
        raise HarnessError(f"lm-eval task {name!r}: {one_line(exc)}") from None
    tasks = loaded.get("tasks", {})
    task = tasks.get(name)
    if task is None or len(tasks) != 1:
        raise HarnessError(f"lm-eval task {name!r} is a group; name one task")
    if metadata:
        task._config.metadata = {**(task._config.metadata or {}), **metadata}
    return task


def _call(inner: Any, method: str, requests: list[Any]) -> Any:
    fn = getattr(inner, method)
    if "disable_tqdm" in pyinspect.signature(fn).parameters:
        return fn(requests, disable_tqdm=True)  # one progress bar per document says nothing
    return fn(requests)


def _jsonable(value: object) -> object:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()  # numpy scalars
    return value


def _restore(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _shard_lm(
    inner: Any,
    done: Mapping[str, Sequence[SampleRecord]],
    sink: Sink,
    clock: dict[str, float],
    times: dict[str, float],
    *,
    docs: Sequence[int],
) -> Any:
    """An LM that asks `inner` one document at a time and answers stored documents from the store."""
    from lm_eval.api.model import LM

    class ShardLM(LM):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def loglikelihood(self, requests: list[Any], **kw: Any) -> list[Any]:
            return self._run("loglikelihood", requests)

        def loglikelihood_rolling(self, requests: list[Any], **kw: Any) -> list[Any]:
            return self._run("loglikelihood_rolling", requests)

        def generate_until(self, requests: list[Any], **kw: Any) -> list[Any]:
            return self._run("generate_until", requests)

        def _run(self, method: str, requests: list[Any]) -> list[Any]:
            groups: dict[tuple[str, int], list[int]] = {}
            for i, req in enumerate(requests):
                groups.setdefault((str(req.task_name), docs[int(req.doc_id)]), []).append(i)
            out: list[Any] = [None] * len(requests)
            for (_task, doc_id), index in groups.items():
                key = sample_key(doc_id)
                stored = done.get(key, ())
                if stored and stored[0].get("method") == method and len(stored[0]["responses"]) == len(index):
                    responses = [_restore(r) for r in stored[0]["responses"]]
                    times[key] = float(stored[0].get("model_s") or 0.0)
                else:
                    t = time.monotonic()
                    clock.setdefault("first", t)
                    try:
                        responses = list(_call(inner, method, [requests[i] for i in index]))
                    except Exception as exc:
                        raise ModelCallError(f"document {doc_id}: {one_line(exc)}") from exc
                    took = time.monotonic() - t
                    clock["model_s"] = clock.get("model_s", 0.0) + took
                    clock["ran"] = clock.get("ran", 0) + 1
                    times[key] = round(took, 4)
                    record = {"id": doc_id, "key": key, "epoch": 1, "method": method}
                    sink({**record, "responses": _jsonable(responses), "model_s": round(took, 4)})
                for i, response in zip(index, responses, strict=True):
                    out[i] = response
            return out

    return ShardLM()


class LmEvalHarness:
    name = "lm-eval"
    integer_ids = True

    def list_samples(self, task: str, args: Mapping[str, Any], options: Mapping[str, Any]) -> list[SampleId]:
        _offline()
        return list(range(len(_load_task(task, options, args).eval_docs)))

    def _evaluate_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        import lm_eval

        rest = {k: v for k, v in options.items() if k not in OWN_OPTIONS | MODEL_OPTIONS}
        bad = sorted(set(rest) & RESERVED)
        if bad:
            raise HarnessError(f"lm-eval option {bad[0]!r} is set by spot-eval; remove it")
        unknown = sorted(set(rest) - set(pyinspect.signature(lm_eval.simple_evaluate).parameters))
        if unknown:
            raise HarnessError(f"lm-eval has no simple_evaluate() option {unknown[0]!r}")
        return rest

    def run(self, job: Job, sink: Sink) -> Outcome:
        t0 = time.monotonic()
        _offline()
        import lm_eval
        from lm_eval.api.registry import get_model

        chat = bool(job.options.get("chat", False))
        rest = self._evaluate_options(job.options)
        task = _load_task(job.task, job.options, job.args)
        size = len(task.eval_docs)
        outside = [s for s in job.samples if not isinstance(s, int) or not 0 <= s < size]
        if outside:
            raise HarnessError(
                f"lm-eval task {job.task!r} has {size} documents (0..{size - 1}); "
                f"sample {outside[0]!r} is not one"
            )
        model_args: dict[str, Any] = {
            "base_url": job.openai_base_url + ("/chat/completions" if chat else "/completions"),
            "model": job.model,
            "tokenizer_backend": None,
            "max_retries": 3,
            **{k: v for k, v in job.options.items() if k in MODEL_OPTIONS},
        }
        try:
            inner = get_model("local-chat-completions" if chat else "local-completions")(**model_args)
        except Exception as exc:
            return Outcome(HARNESS_ERROR, f"lm-eval model: {one_line(exc)}")
        clock: dict[str, float] = {}
        times: dict[str, float] = {}
        docs = sorted({int(s) for s in job.samples})  # lm-eval's position -> the document's index
        try:
            results = lm_eval.simple_evaluate(
                model=_shard_lm(inner, job.done, sink, clock, times, docs=docs),
                tasks=[task],
                samples={job.task: docs},  # in index order: lm-eval's own log maps positions by it
                log_samples=True,
                apply_chat_template=chat,
                **rest,
            )
        except ModelCallError as exc:
            return _timed(Outcome(MODEL_FAILURE, f"model call failed: {exc}"), t0, clock)
        except Exception as exc:
            return _timed(Outcome(HARNESS_ERROR, f"lm-eval: {one_line(exc)}"), t0, clock)
        _write_log(job.log_dir, results)
        scored = scored_samples(results, job.task) if results else {}
        samples: dict[SampleId, SampleRecord] = dict(scored.items())
        missing = [s for s in job.samples if s not in samples]
        if missing:
            reason = f"lm-eval returned no score for document {missing[0]}"
            return _timed(Outcome(HARNESS_ERROR, reason), t0, clock)
        for s in job.samples:
            samples[s]["model_s"] = times.get(sample_key(s), 0.0)
        outcome = Outcome(COMPLETED, samples=[samples[s] for s in job.samples])
        return _timed(outcome, t0, clock)


def _timed(outcome: Outcome, t0: float, clock: Mapping[str, float]) -> Outcome:
    outcome.startup_s = round(clock.get("first", time.monotonic()) - t0, 3)
    outcome.model_s = round(clock.get("model_s", 0.0), 4)
    outcome.ran = int(clock.get("ran", 0))
    return outcome


def scored_samples(results: Mapping[str, Any], task: str) -> dict[int, SampleRecord]:
    """doc index -> the result's record, from `simple_evaluate(log_samples=True)`'s samples (whose
    `doc_id` lm-eval maps back to the index through the `samples` it was given, in index order)."""
    out: dict[int, SampleRecord] = {}
    for entry in results.get("samples", {}).get(task, []):
        doc = int(entry["doc_id"])
        suffix = "" if entry.get("filter", "none") == "none" else f",{entry['filter']}"
        record = out.setdefault(
            doc,
            {
                "id": doc,
                "key": sample_key(doc),
                "epoch": 1,
                "scores": {},
                "target": _jsonable(entry.get("target")),
            },
        )
        for metric in entry.get("metrics", []):
            value = _jsonable(entry.get(metric))
            if isinstance(value, bool | int | float | str):
                record["scores"][metric + suffix] = value
        if "answer" not in record:
            resps = entry.get("filtered_resps") or []
            first = resps[0] if resps else None
            record["answer"] = first if isinstance(first, str) else None
    return out


def _write_log(folder: str, results: Mapping[str, Any] | None) -> None:
    """lm-eval's own results and samples, as its `--output_path` would write them."""
    if not results:
        return
    import json

    os.makedirs(folder, exist_ok=True)
    samples = results.get("samples", {})
    summary = {k: v for k, v in results.items() if k != "samples"}
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True, default=_jsonable)
    for task, entries in samples.items():
        with open(os.path.join(folder, f"samples_{task}.jsonl"), "w") as f:
            for entry in entries:
                f.write(json.dumps(entry, sort_keys=True, default=_jsonable) + "\n")


def _offline() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars would bury the episode's last line
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
