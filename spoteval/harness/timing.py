"""Start-up per shard and time per sample: what the shard size is chosen from, and where each comes from.

- The harness benchmark (`python -m benchmarks.harness_bench --write`) measures each harness's
  start-up and per-sample time against the stand-in model server and writes them to
  `spoteval/harness/measured.json` (with the date, the harness version and the machine's load):
  the default.
- A run record that already has completed shards of the harness: its shards' own start-up (the
  runner's `startup_s`, median) and wall time per sample after start-up (attempt seconds minus
  start-up, over the samples the attempt ran). `timing_from_record(store, run_id, harness)`;
  the stack's `eval.timing_from: {store, run_id}` and the drill's `--timing-from DRILL_FOLDER`.
- The user's own figures (`eval.startup_s`, `eval.sample_s`, or `shard_size` itself) override both.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

MEASURED_FILE: Final = Path(__file__).with_name("measured.json")
#: when a harness has no measured figures at all
FALLBACK: Final = (5.0, 1.0)


@dataclass(frozen=True)
class Timing:
    startup_s: float
    sample_s: float
    source: str = ""  # where the figures come from, for the stated plan

    def given(self, startup_s: float | None, sample_s: float | None) -> Timing:
        """These figures with the user's own in place of either (the source says which)."""
        if startup_s is None and sample_s is None:
            return self
        parts = [p for p, v in (("start-up", startup_s), ("time per sample", sample_s)) if v is not None]
        source = f"{' and '.join(parts)} as given" + (f", the rest {self.source}" if len(parts) < 2 else "")
        return replace(
            self,
            startup_s=self.startup_s if startup_s is None else startup_s,
            sample_s=self.sample_s if sample_s is None else sample_s,
            source=source,
        )


def _load(path: Path = MEASURED_FILE) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def benchmark_timing(harness: str, path: Path = MEASURED_FILE) -> Timing:
    """The harness benchmark's figures for `harness` (measured.json)."""
    entry = _load(path).get(harness)
    if not isinstance(entry, Mapping):
        return Timing(*FALLBACK, source="no measurement (a guess)")
    where = ", ".join(str(entry[k]) for k in ("version", "measured") if entry.get(k))
    return Timing(float(entry["startup_s"]), float(entry["sample_s"]), source=f"harness benchmark ({where})")


def timing_from_results(attempts: list[Mapping[str, Any]], harness: str, run_id: str) -> Timing | None:
    """From completed attempts' outputs (the shard runner's result) and their seconds."""
    startups: list[float] = []
    wall = 0.0
    ran = 0
    for a in attempts:
        out = a.get("output")
        if a.get("outcome") != "completed" or not isinstance(out, Mapping) or out.get("harness") != harness:
            continue
        startup = out.get("startup_s")
        seconds = (a.get("details") or {}).get("seconds")
        if not isinstance(startup, int | float) or not isinstance(seconds, int | float):
            continue
        startups.append(float(startup))
        n = int(out.get("ran") or 0)
        if n > 0:
            wall += max(0.0, float(seconds) - float(startup))
            ran += n
    if not startups or ran == 0:
        return None
    return Timing(
        round(statistics.median(startups), 3),
        round(max(wall / ran, 1e-3), 4),
        source=f"run record {run_id} ({len(startups)} completed shard attempts, {ran} samples)",
    )


def timing_from_record(store: Any, run_id: str, harness: str) -> Timing | None:
    """The timing a run record measured for `harness` (None when it has no completed shard)."""
    from spoteval.record import RunLayout

    layout = RunLayout(run_id)
    attempts: list[Mapping[str, Any]] = []
    for key in store.list(layout.attempts_prefix):
        data = store.get(key)
        if data is None:
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if isinstance(obj, dict):
            attempts.append(obj)
    return timing_from_results(attempts, harness, run_id)
