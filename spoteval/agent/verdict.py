"""Whether a finished run measured anything: every episode's result a harness error is a failed run.

A harness error is not the model's (a missing harness, a task that does not load, a failed
requirements install): a run whose every episode ended that way never reports success. At the end
of a run (`stop: done`) in which this incarnation recorded a harness error, the agent reads the
run's results (only then: a run without harness errors reads nothing more) and, when each is a
harness error, exits with `exits.HARNESS_ERRORS` (3) and says why; the `stop` event carries
`harness_errors: "every episode"` and the first reason.
"""

from __future__ import annotations

import json

from spoteval.record import RunLayout
from spoteval.store import Store, StoreError


def every_episode_harness_error(store: Store, layout: RunLayout, episodes: int) -> str | None:
    """The first reason when every one of `episodes` has a result and each is a harness error."""
    try:
        keys = sorted(store.list(layout.results_prefix))
    except StoreError:
        return None
    if episodes == 0 or len(keys) != episodes:
        return None
    first: str | None = None
    for key in keys:
        try:
            data = store.get(key)
            result = json.loads(data) if data is not None else None
        except (StoreError, ValueError):
            return None
        if not isinstance(result, dict) or result.get("outcome") != "harness_error":
            return None
        if first is None:
            lines = [ln for ln in str(result.get("error") or "").splitlines() if ln.strip()]
            first = lines[-1].strip() if lines else "no reason recorded"
    return first
