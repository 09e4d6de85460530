"""Probing the model server (`/v1/models`, a one-token completion) and reading the run record's events."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from spoteval.measure.phases import HealthError
from spoteval.record import Event, RecordError
from spoteval.store import Store

# --- the model server ---------------------------------------------------------------------------


def _request(url: str, body: Mapping[str, Any] | None, timeout_s: float) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, None


def wait_models(base_url: str, deadline: float, poll_s: float) -> str:
    """Poll `/v1/models` until it answers 200 with a model; returns the first model's id."""
    last = "no answer yet"
    while True:
        try:
            status, body = _request(f"{base_url}/v1/models", None, timeout_s=10)
            if status == 200 and isinstance(body, dict) and body.get("data"):
                first = body["data"][0]
                model = first.get("id") if isinstance(first, dict) else None
                if isinstance(model, str):
                    return model
                last = "the model list has no id"
            else:
                last = f"HTTP {status}"
        except (OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            raise HealthError(f"{base_url}/v1/models did not answer in time (last: {last})")
        time.sleep(poll_s)


def first_token(base_url: str, model: str, deadline: float, poll_s: float) -> None:
    """POST a one-token completion until it is answered with a choice."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    last = "no answer yet"
    while True:
        try:
            status, reply = _request(f"{base_url}/v1/completions", body, timeout_s=60)
            if status == 200 and isinstance(reply, dict) and reply.get("choices"):
                return
            last = f"HTTP {status}"
            if 400 <= status < 500 and status not in (404, 408, 429):
                raise HealthError(f"{base_url}/v1/completions refused the request: HTTP {status} {reply}")
        except (OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            raise HealthError(f"{base_url}/v1/completions did not answer in time (last: {last})")
        time.sleep(poll_s)


def read_events(store: Store, keys: Sequence[str], console: Console) -> list[Event]:
    """The events under `keys`; an object that is not an event is reported and skipped."""
    events: list[Event] = []
    for key in keys:
        data = store.get(key)
        if data is None:
            continue
        try:
            event, _problems = Event.loads(data)
        except RecordError as exc:
            console.print(f"[yellow]skipping {key}: {exc}[/yellow]")
            continue
        events.append(event)
    return events
