"""`python -m scripts.report` as one call: where the run is, what the record cannot know, what to print.

`run_report(...)` finds the store and run (given, or from a stack's outputs: the stack is found as
every command finds it, before `pulumi` is asked), the base for the next placement (the user's
workload file, else the stack's `spot-eval:workload` block under the stack's grant, else nothing:
the record alone; never the built-in example), builds the report with its next placement, writes
the plot if asked and returns the text or JSON to print. Bad input is a `UsageError` (one line);
the store's problems are `ReportError`s.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spoteval.clouds.base import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.config_reader import DocumentError, describe, read_mapping
from spoteval.events.base import Capture, EventsError, Recorded, record
from spoteval.events.readers import open_events
from spoteval.placement import PlacementError
from spoteval.placement.inputs import check_given, stack_workload
from spoteval.report.as_json import report_json
from spoteval.report.as_text import render
from spoteval.report.load import ReportError, load_run
from spoteval.report.next_run import Base, build
from spoteval.report.plot import plot_timeline
from spoteval.stack import (
    StackNotFound,
    StackOutputError,
    find_stack,
    pulumi_stack_output,
    read_json,
    shown_path,
    stack_settings,
)
from spoteval.store import Store, StoreError

REPO = Path(__file__).resolve().parents[2]


class UsageError(Exception):
    """Bad input: names the argument, file or key."""


def _read_json(path: str) -> Any:
    try:
        return read_json(Path(path))
    except DocumentError as exc:
        raise UsageError(describe(exc, "outputs file")) from None


def _pulumi_outputs(stack: str) -> Any:
    try:
        return pulumi_stack_output(stack, cwd=REPO)
    except StackOutputError as exc:
        if exc.reason == "no-cli":
            raise UsageError(
                f"--stack {stack}: the pulumi CLI is not on PATH; save the outputs with "
                "`pulumi stack output --json` and pass --outputs FILE.json"
            ) from None
        if exc.reason == "not-json":
            raise UsageError(f"--stack {stack}: pulumi stack output is not JSON: {exc.detail}") from None
        first = (exc.stderr.strip().splitlines() or [exc.detail or "no output"])[0]
        raise UsageError(f"--stack {stack}: pulumi stack output failed: {first}") from None


def stack_outputs(stack: str, outputs_file: str | None) -> Mapping[str, Any]:
    """The stack's outputs, from a saved file or from the Pulumi CLI."""
    data = _read_json(outputs_file) if outputs_file else _pulumi_outputs(stack)
    if not isinstance(data, dict):
        raise UsageError(f"--stack {stack}: the outputs are not a JSON object")
    for key in ("bucket_url", "run_id"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UsageError(f"--stack {stack}: the outputs have no {key!r}")
    return data


def stack_base(stack: str, stacks_dir: Path | None) -> Base:
    """The stack's `spot-eval:workload` block under its grant (the options it cannot declare left
    out), as the base of the next placement; the record alone when the stack has no block."""
    try:
        path = find_stack(stack, stacks_dir)
        settings = stack_settings(read_mapping(path))
        loaded = stack_workload(stack, settings, f"{shown_path(path)} (prices, deadline and grant)")
    except StackNotFound as exc:
        raise UsageError(str(exc)) from None
    except DocumentError as exc:
        raise UsageError(describe(exc, "stack file")) from None
    except PlacementError as exc:
        raise UsageError(f"{shown_path(path)}: {exc}") from None
    return Base.of(loaded)


def workload_base(path: str) -> Base:
    """The user's workload file as the base of the next placement; every key it gives is checked
    as the placement checks it, even one a measurement will replace."""
    try:
        doc = read_mapping(Path(path))
        check_given(doc)
    except DocumentError as exc:
        raise UsageError(describe(exc, "workload file")) from None
    except PlacementError as exc:
        raise UsageError(f"--workload {path}: {exc}") from None
    return Base(doc, path)


def stack_capture(stack: str, found: Mapping[str, Any]) -> tuple[StackOutputs, Capture]:
    """The stack's outputs and its `event_capture`; UsageError (one line) when it has none."""
    try:
        outputs = StackOutputs.parse(found, f"--stack {stack}: outputs")
        return outputs, Capture.from_outputs(outputs, f"--stack {stack}")
    except (ControlPlaneError, EventsError) as exc:
        raise UsageError(str(exc)) from None


def record_provider_events(outputs: StackOutputs, capture: Capture, store: Store) -> Recorded:
    """Read the stack's event capture through its provider's reader and record each event once.

    A CloudWatch Logs capture of a pool holds every instance of the region: only the stack's nodes
    and the nodes the run's record names are kept (the other readers see only the stack's own)."""
    try:
        events = open_events(capture, outputs, PlaneOptions()).read()
        if capture.kind == "cloudwatch_logs":
            known = set(outputs.node_ids)
            with contextlib.suppress(ReportError):  # no record yet: only the stack's nodes
                known |= {e.node for e in load_run(store, outputs.run_id).events}
            events = [e for e in events if e.node in known]
        return record(store, outputs, events, capture.kind)
    except (EventsError, ControlPlaneError) as exc:
        raise ReportError(f"--provider-events: {exc}") from None


def run_report(
    *,
    store: str | None,
    run: str | None,
    stack: str | None,
    outputs: str | None,
    workload: str | None,
    shared: bool,
    as_json: bool,
    plot: str | None,
    provider_events: bool = False,
    stacks_dir: str | None = None,
) -> str:
    """The report the command line asks for, as the text to print. With `provider_events`, the
    stack's event capture is read and recorded first (a line on stderr says what was written)."""
    base = Base({})
    capture: tuple[StackOutputs, Capture] | None = None
    if provider_events and not stack:
        raise UsageError("--provider-events reads the stack's event capture: give --stack NAME")
    if outputs and not stack:
        raise UsageError("--outputs gives a stack's outputs: give --stack NAME with it")
    if stacks_dir and not stack:
        raise UsageError("--stacks-dir is where --stack NAME is looked for: give --stack NAME with it")
    if stack:
        if store or run:
            raise UsageError("--stack replaces --store and --run: give one or the other")
        base = stack_base(stack, Path(stacks_dir) if stacks_dir else None)
        found = stack_outputs(stack, outputs)
        if provider_events:
            capture = stack_capture(stack, found)
        url, run_id = str(found["bucket_url"]), str(found["run_id"])
    else:
        if not store or not run:
            raise UsageError("give --store URL and --run ID (or --stack NAME)")
        url, run_id = store, run
    if workload:
        base = workload_base(workload)
    try:
        opened = Store(url)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if capture is not None:
        print(f"report: {record_provider_events(*capture, opened).summary()}", file=sys.stderr)
    rep = build(opened, run_id, base, stack=stack)
    if plot:
        try:
            plot_timeline(rep, plot, shared=shared)
        except OSError as exc:
            raise UsageError(f"--plot {plot}: {exc.strerror or exc}") from None
    if as_json:
        return json.dumps(report_json(rep, shared=shared), indent=2, sort_keys=True) + "\n"
    return render(rep, shared=shared)
