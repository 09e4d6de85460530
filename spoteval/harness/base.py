"""What every harness module provides: the `Harness` protocol, a shard's job, and its outcome.

A harness module (inspect, lm-eval) runs one shard of a task's samples in this process against an
OpenAI-compatible model server, hands each finished sample to a sink as it finishes (the shard
runner streams it to the run record's store), and decides the shard's outcome from the harness's own
log, never from an exit code alone:

- `completed`: every sample of the shard has a record;
- `model_failure`: a sample failed on a model call (server error, refused connection, timeout);
- `harness_error`: anything else: an unknown task or sample, bad arguments, a crash before or
  outside the model's work. Never counted against the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from spoteval.harness.ids import SampleId

COMPLETED: Final = "completed"
MODEL_FAILURE: Final = "model_failure"
HARNESS_ERROR: Final = "harness_error"

#: One finished sample, as stored and as listed in the result: `id`, `key`, `epoch`, `scores`
#: (name -> number, bool or string), `answer`, `target`, `model_s` (model time of the sample).
SampleRecord = dict[str, Any]
Sink = Callable[[SampleRecord], None]


class HarnessError(Exception):
    """Bad input for a harness (unknown harness, task, sample or argument): one line."""


@dataclass(frozen=True)
class Job:
    """One attempt at one shard."""

    task: str
    model: str
    openai_base_url: str
    samples: Sequence[SampleId]  # the whole shard, in order
    done: Mapping[str, Sequence[SampleRecord]]  # key -> its records (by epoch) already in the store
    log_dir: str  # this attempt's local folder for the harness's own logs
    args: Mapping[str, Any] = field(default_factory=dict)  # the task's arguments
    options: Mapping[str, Any] = field(default_factory=dict)  # the harness's own options


@dataclass
class Outcome:
    outcome: str  # completed | model_failure | harness_error
    reason: str | None = None
    samples: list[SampleRecord] = field(default_factory=list)  # every sample, when completed
    startup_s: float | None = None  # harness start-up: import, task load, until the first sample
    model_s: float = 0.0  # model time of the samples run in this attempt
    ran: int = 0  # samples run in this attempt (the others came from the store)


class Harness(Protocol):
    """One eval harness. Importing the module that defines it must not import the harness itself."""

    name: str
    #: the harness's sample ids are integers (lm-eval's document indices)
    integer_ids: bool

    def list_samples(self, task: str, args: Mapping[str, Any], options: Mapping[str, Any]) -> list[SampleId]:
        """Every sample id of the task, in the harness's order (raises HarnessError)."""
        ...

    def run(self, job: Job, sink: Sink) -> Outcome:
        """Run the shard's samples that are not in `job.done`; `sink` gets each one as it finishes."""
        ...


def one_line(exc: BaseException | str, limit: int = 400) -> str:
    """The first non-empty line of an error, with its type when that says something."""
    text = str(exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if isinstance(exc, BaseException):
        kind = type(exc).__name__
        line = f"{kind}: {line}" if line else kind
    return line[:limit]
