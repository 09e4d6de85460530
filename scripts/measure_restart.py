"""Measure the restart cost S on a deployed stack: forced stop/start (or preemption) cycles.

    python -m scripts.measure_restart --stack NAME [--cycles 3] [--mode stop-start|preempt] [--yes]
    python -m scripts.measure_restart --outputs outputs.json [--grant grant.yaml] ...

Without `--yes` it prints the plan (node, cycles, state and price now, the most it can cost) and
changes nothing. With `--yes`, each cycle:

  stop         stop requested -> stopped (`--mode preempt`: `preempt`, the provider takes the node)
  price_check  the price read and the grant checked (a price above the cap refuses the start)
  start        start requested -> running: the capacity wait (S_wait, not billed)
  serve        running -> the model server answers /v1/models (boot, image, weights, warm-up)
  first_token  -> a one-token /v1/completions answered
  agent_ready  -> the agent's `ready` event is in the run record (`--wait-ready`)

S_wait = start; S_boot = serve + first_token + agent_ready; S = S_wait + S_boot. Every stop, start
and preemption is written to the run record with its reason and price, and each measured cycle
as a `heartbeat` with the phase timings. Exit codes: 0 done (or the plan shown), 1 the
measurement failed or the grant refused a start, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from spoteval.clouds import (
    ControlPlane,
    ControlPlaneError,
    NodeState,
    PlaneConfig,
    Price,
    StackOutputs,
    open_plane,
    wait_for,
)
from spoteval.grant import Grant, GrantError, Refusal
from spoteval.record import Event, RecordError, RunLayout, utc_now
from spoteval.store import Store, StoreError

PROG: Final = "measure_restart"
#: Phases in the order they happen; S_wait and S_boot are made of the last four.
PHASES: Final = ("stop", "preempt", "price_check", "start", "serve", "first_token", "agent_ready")
WAIT_PHASES: Final = ("start",)
BOOT_PHASES: Final = ("serve", "first_token", "agent_ready")
PHASE_LABELS: Final = {
    "stop": "stop requested -> stopped (not in S)",
    "preempt": "preemption -> stopped (not in S)",
    "price_check": "price read, grant checked (not in S)",
    "start": "start requested -> running (S_wait)",
    "serve": "running -> /v1/models answers (S_boot)",
    "first_token": "one-token completion (S_boot)",
    "agent_ready": "agent's ready event in the record (S_boot)",
}
GCP_KEY_ENV: Final = "SPOTEVAL_GCP_BILLING_API_KEY"


class MeasureError(Exception):
    """Bad input or a setup that cannot work; the message names the option, file or key."""


class HealthError(Exception):
    """The model server did not answer as expected in time."""


class Refused(Exception):
    """The grant refused a start (already recorded as a `stop` with its stop rule)."""


# --- inputs -----------------------------------------------------------------------------------


def _load_mapping(path: Path, what: str) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise MeasureError(f"{what} {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)  # JSON first: YAML 1.1 reads a JSON number like 1e-05 as a string
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MeasureError(f"{what} {path}: not YAML or JSON: {str(exc).splitlines()[0]}") from None


def load_grant(path: Path) -> Grant:
    raw = _load_mapping(path, "grant file")
    if isinstance(raw, Mapping):
        for key in ("spot-eval:grant", "grant"):
            if key in raw and len(raw) == 1:
                raw = raw[key]
    try:
        return Grant.parse(raw, where=f"{path}")
    except GrantError as exc:
        raise MeasureError(str(exc)) from None


def stack_outputs(stack: str) -> Any:
    """`pulumi stack output --json --stack NAME`, parsed."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise MeasureError(
            "--stack: the pulumi CLI is not on PATH (or pass the outputs with --outputs FILE.json)"
        )
    try:
        done = subprocess.run(
            [pulumi, "stack", "output", "--json", "--stack", stack],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MeasureError(f"--stack {stack}: pulumi stack output: {exc}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise MeasureError(
            f"--stack {stack}: pulumi stack output failed: {lines[-1] if lines else done.returncode}"
        )
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise MeasureError(f"--stack {stack}: pulumi stack output did not print JSON") from None


@dataclass(frozen=True)
class Inputs:
    """What the measurement runs against: the outputs, the grant, and what the stack config adds."""

    outputs: StackOutputs
    grant: Grant
    source: str
    #: from the stack config: the workload's price for the market, the provider's own block
    configured_price: float | None = None
    provider_block: Mapping[str, Any] = field(default_factory=dict)


def stack_config(stacks_dir: Path, stack: str) -> tuple[Path, Mapping[str, Any]]:
    """The `spot-eval:` keys of stacks/Pulumi.NAME.yaml, without the namespace."""
    path = stacks_dir / f"Pulumi.{stack}.yaml"
    doc = _load_mapping(path, "stack file")
    config = doc.get("config") if isinstance(doc, Mapping) else None
    if not isinstance(config, Mapping):
        return path, {}
    prefix = "spot-eval:"
    return path, {
        k[len(prefix) :]: v for k, v in config.items() if isinstance(k, str) and k.startswith(prefix)
    }


def _workload_price(config: Mapping[str, Any], market: str) -> float | None:
    workload = config.get("workload")
    prices = workload.get("prices") if isinstance(workload, Mapping) else None
    value = prices.get(market) if isinstance(prices, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def load_inputs(args: argparse.Namespace) -> Inputs:
    config: Mapping[str, Any] = {}
    if args.stack:
        raw = stack_outputs(args.stack)
        path, config = stack_config(Path(args.stacks_dir), args.stack)
        try:
            grant = Grant.parse(config.get("grant"), where=f"{path}: spot-eval:grant")
        except GrantError as exc:
            raise MeasureError(str(exc)) from None
        source = f"stack {args.stack}"
    else:
        path = Path(args.outputs)
        try:
            raw = json.loads(path.read_text())
        except OSError as exc:
            raise MeasureError(f"--outputs {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise MeasureError(f"--outputs {path}: not JSON: {exc}") from None
        grant = Grant()
        source = str(path)
    if args.grant:
        grant = load_grant(Path(args.grant))
    try:
        outputs = StackOutputs.parse(raw, where=source)
    except ControlPlaneError as exc:
        raise MeasureError(str(exc)) from None
    block = config.get(outputs.provider)
    return Inputs(
        outputs,
        grant,
        source,
        configured_price=_workload_price(config, outputs.market),
        provider_block=block if isinstance(block, Mapping) else {},
    )


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


# --- results ------------------------------------------------------------------------------------


@dataclass
class CycleResult:
    cycle: int
    phases: dict[str, float] = field(default_factory=dict)
    price: Price | None = None
    address_before: str | None = None
    address_after: str | None = None
    model: str | None = None
    agent: Mapping[str, Any] | None = None

    @property
    def s_wait(self) -> float:
        return sum(self.phases.get(p, 0.0) for p in WAIT_PHASES)

    @property
    def s_boot(self) -> float:
        return sum(self.phases.get(p, 0.0) for p in BOOT_PHASES)

    @property
    def total(self) -> float:
        return self.s_wait + self.s_boot

    @property
    def address_changed(self) -> bool:
        return self.address_before is not None and self.address_before != self.address_after

    def to_json(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "phases": {p: round(self.phases[p], 3) for p in PHASES if p in self.phases},
            "s_wait_s": round(self.s_wait, 3),
            "s_boot_s": round(self.s_boot, 3),
            "total_s": round(self.total, 3),
            "price": self.price.to_json() if self.price else None,
            "address": {
                "before": self.address_before,
                "after": self.address_after,
                "changed": self.address_changed,
            },
            "model": self.model,
            "agent_ready": dict(self.agent) if self.agent is not None else None,
        }


def spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


# --- the measurement ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeouts:
    stop_s: float
    start_s: float
    serve_s: float
    ready_s: float

    def cycle_hours(self, wait_ready: bool) -> float:
        """The longest one cycle can keep the node billed: from the start request to the next stop."""
        return (self.start_s + self.serve_s + (self.ready_s if wait_ready else 0.0) + self.stop_s) / 3600


class Measurement:
    def __init__(
        self,
        plane: ControlPlane,
        outputs: StackOutputs,
        grant: Grant,
        store: Store,
        *,
        mode: str,
        cycles: int,
        leave: str,
        timeouts: Timeouts,
        health_url: str | None,
        wait_ready: bool,
        poll_s: float,
        progress: Progress,
        console: Console,
    ) -> None:
        self.plane = plane
        self.outputs = outputs
        self.grant = grant
        self.store = store
        self.layout = RunLayout(outputs.run_id)
        self.mode = mode
        self.cycles = cycles
        self.leave = leave
        self.timeouts = timeouts
        self.health_url = health_url.rstrip("/") if health_url else None
        self.wait_ready = wait_ready
        self.poll_s = poll_s
        self.health_poll_s = min(poll_s, 1.0)
        self.progress = progress
        self.console = console
        self.task = progress.add_task("starting", total=cycles)
        self.results: list[CycleResult] = []
        self.prices: list[Price] = []
        self.last_price: Price | None = None
        self.last_address: str | None = None
        self.phase = "setup"
        self.cycle_no = 0
        self.outcome = "completed"
        self.error: str | None = None
        self.final_state: str | None = None
        self._seq = 0

    # --- the record ---------------------------------------------------------------------------

    def write(self, kind: str, reason: str | None, price: Price | None, details: Mapping[str, Any]) -> Event:
        event = Event(
            time=utc_now(),
            run_id=self.outputs.run_id,
            node=self.plane.node,
            kind=kind,
            reason=reason,
            provider=self.outputs.provider,
            region=self.outputs.region,
            zone=self.outputs.zone,
            instance_type=self.outputs.instance_type,
            market=self.outputs.market,
            price_per_hour=price.per_hour if price else None,
            currency=price.currency if price else None,
            price_source=price.source if price else "unknown",
            details={"source": PROG, "mode": self.mode, **details},
        )
        data = event.dumps()
        for _ in range(100):
            self._seq += 1
            if self.store.put_new(self.layout.event(event.time, event.node, self._seq), data):
                return event
        raise StoreError(f"could not write a {kind} event under {self.store.join(self.layout.events_prefix)}")

    def event_keys(self) -> list[str]:
        return self.store.list(self.layout.events_prefix)

    def read_events(self, keys: Sequence[str] | None = None) -> list[Event]:
        return read_events(self.store, keys if keys is not None else self.event_keys(), self.console)

    # --- one cycle ----------------------------------------------------------------------------

    def _show(self, phase: str, text: str) -> None:
        self.phase = f"{phase} ({text}) of cycle {self.cycle_no}"
        self.progress.update(self.task, description=f"cycle {self.cycle_no}/{self.cycles}: {text}")

    def _settle(self) -> NodeState:
        state = self.plane.state()
        if state.status in ("pending", "stopping"):
            self._show("settle", "waiting for the node to finish changing state")
            state = wait_for(
                self.plane.state,
                {"running", "stopped"},
                timeout_s=self.timeouts.start_s,
                poll_s=self.poll_s,
                what=f"{self.outputs.provider} {self.plane.node}",
            )
        if state.status not in ("running", "stopped"):
            raise ControlPlaneError(f"{self.outputs.provider} {self.plane.node}: the node is {state.raw}")
        return state

    def check_grant(self, price: Price) -> None:
        self.grant.check_price_now(price.per_hour, price.currency)
        if self.grant.budget is not None:
            self.grant.check_budget(
                self.read_events(),
                next_hours=self.timeouts.cycle_hours(self.wait_ready),
                price_per_hour=price.per_hour,
            )

    def refuse(self, refusal: Refusal, price: Price, **details: Any) -> Refused:
        self.write(
            "stop",
            refusal.stop_reason,
            price,
            {"refused": "start", "message": str(refusal), "price_cap": self.grant.price_cap, **details},
        )
        note = ""
        if self.plane.restarts_itself and self.mode == "preempt":
            note = " (the provider may still restart the node by itself when capacity returns)"
        return Refused(f"start refused: {refusal}{note}")

    def run_cycle(self, n: int) -> CycleResult:
        self.cycle_no = n
        result = CycleResult(n)
        state = self._settle()
        if state.running:
            self.last_address = self.plane.address()
            t0 = time.monotonic()
            if self.mode == "preempt":
                self._show("preempt", "waiting for the provider to take the node")
                method = self.plane.simulate_preemption(self.timeouts.stop_s)
                result.phases["preempt"] = time.monotonic() - t0
                self.write(
                    "preempted",
                    "provider",
                    self.last_price,
                    {"cycle": n, "simulated": True, "method": method, "phase_s": result.phases["preempt"]},
                )
            else:
                self._show("stop", "stopping the node")
                self.plane.stop(self.timeouts.stop_s)
                result.phases["stop"] = time.monotonic() - t0
                self.write(
                    "stop", "measurement", self.last_price, {"cycle": n, "phase_s": result.phases["stop"]}
                )
        result.address_before = self.last_address

        self._show("price_check", "reading the price, checking the grant")
        t0 = time.monotonic()
        price = self.plane.price_now()
        self.prices.append(price)
        self.last_price = result.price = price
        try:
            self.check_grant(price)
        except Refusal as refusal:
            raise self.refuse(refusal, price, cycle=n) from None
        result.phases["price_check"] = time.monotonic() - t0

        by = "provider" if self.mode == "preempt" and self.plane.restarts_itself else "request"
        self.write("start", "measurement", price, {"cycle": n, "by": by})
        keys_before = set(self.event_keys()) if self.wait_ready else set()
        self._show("start", "starting the node: capacity wait")
        t0 = time.monotonic()
        self.plane.start(self.timeouts.start_s)
        running = time.monotonic()
        result.phases["start"] = running - t0

        self._show("serve", "waiting for the model server")
        address = self.plane.address()
        result.address_after = self.last_address = address
        base = self.health_url
        published = getattr(self.plane, "server_url", None)  # a port mapped elsewhere (Runpod)
        if base is None and callable(published):
            base = published()
        if base is None:
            if not address:
                raise HealthError(
                    f"{self.plane.node} has no address to reach the model server at (--health-url)"
                )
            host = f"[{address}]" if ":" in address else address
            base = f"http://{host}:{self.outputs.server_port}"
        deadline = running + self.timeouts.serve_s
        result.model = wait_models(base, deadline, self.health_poll_s)
        served = time.monotonic()
        result.phases["serve"] = served - running
        self._show("first_token", "asking for one token")
        first_token(base, result.model, deadline, self.health_poll_s)
        answered = time.monotonic()
        result.phases["first_token"] = answered - served

        if self.wait_ready:
            self._show("agent_ready", "waiting for the agent's ready event")
            result.agent = self.await_ready(keys_before, answered + self.timeouts.ready_s)
            result.phases["agent_ready"] = time.monotonic() - answered

        self.write(
            "heartbeat",
            None,
            price,
            {
                "cycle": n,
                "measured": result.to_json()["phases"],
                "s_wait_s": round(result.s_wait, 3),
                "s_boot_s": round(result.s_boot, 3),
                "total_s": round(result.total, 3),
                "address_before": result.address_before,
                "address": result.address_after,
                "address_changed": result.address_changed,
                "model": result.model,
            },
        )
        return result

    def await_ready(self, keys_before: set[str], deadline: float) -> Mapping[str, Any]:
        """The details of the first `ready` event of this node written after the start request."""
        seen = set(keys_before)
        while True:
            keys = [k for k in self.event_keys() if k not in seen]
            for event in self.read_events(keys):
                if event.kind == "ready" and event.node == self.plane.node:
                    return dict(event.details)
            seen.update(keys)
            if time.monotonic() >= deadline:
                raise HealthError(f"no ready event from {self.plane.node} in the record in time")
            time.sleep(self.poll_s)

    # --- the whole run ------------------------------------------------------------------------

    def run(self) -> int:
        code = 0
        try:
            for n in range(1, self.cycles + 1):
                result = self.run_cycle(n)
                self.results.append(result)
                self.progress.advance(self.task)
                changed = (
                    f", address {result.address_before} -> {result.address_after}"
                    if result.address_changed
                    else ""
                )
                self.console.print(
                    f"cycle {n}: S_wait {result.s_wait:.1f} s, S_boot {result.s_boot:.1f} s, "
                    f"S {result.total:.1f} s{changed}"
                )
        except Refused as exc:
            self.outcome, self.error, code = "refused", str(exc), 1
        except KeyboardInterrupt:
            self.outcome, self.error, code = "interrupted", f"interrupted during {self.phase}", 130
        except (ControlPlaneError, HealthError, StoreError, RecordError, GrantError) as exc:
            self.outcome, self.error, code = "failed", f"during {self.phase}: {exc}", 1
        except Exception as exc:  # an SDK error no module wrapped: still leave the node as asked
            self.outcome, code = "failed", 1
            self.error = f"during {self.phase}: unexpected {type(exc).__name__}: {exc}"
        try:
            self.leave_node()
        except KeyboardInterrupt:
            self.error = (
                self.error or ""
            ) + "; interrupted again while leaving the node: its state is unknown"
            code = code or 130
        except (Refused, ControlPlaneError, HealthError, StoreError, RecordError, GrantError) as exc:
            self.error = (self.error + "; " if self.error else "") + f"leaving the node {self.leave}: {exc}"
            code = code or 1
        return code

    def leave_node(self) -> None:
        self.progress.update(self.task, description=f"leaving the node {self.leave}")
        details: dict[str, Any] = {"leave": self.leave, "outcome": self.outcome, "cycles": len(self.results)}
        if self.error:
            details["error"] = self.error
        state = self.plane.state()
        if self.leave == "stopped" or self.outcome == "refused":
            if not self.plane.can_stay_stopped:
                self.console.print(
                    f"[yellow]{self.outputs.provider}: the controller keeps a replacement running; "
                    "scale it down to stop it[/yellow]"
                )
                self.final_state = self.plane.state().status
                return
            reason = "user" if self.outcome == "interrupted" else "measurement"
            if not state.stopped:
                self.plane.stop(self.timeouts.stop_s)
                self.write("stop", reason, self.last_price, details)
            elif self.outcome not in ("completed", "refused"):
                # Already stopped when it ended: still record how the measurement ended.
                self.write("stop", reason, self.last_price, {**details, "already_stopped": True})
            self.final_state = "stopped"
            return
        if not state.running:
            price = self.plane.price_now()
            self.prices.append(price)
            self.last_price = price
            try:
                self.check_grant(price)
            except Refusal as refusal:
                raise self.refuse(refusal, price, **details) from None
            self.write("start", "measurement", price, details)
            self.plane.start(self.timeouts.start_s)
        elif self.outcome != "completed":
            self.write("heartbeat", None, self.last_price, details)
        self.final_state = "running"

    def report(self) -> dict[str, Any]:
        known = [p for p in self.prices if p.per_hour is not None]
        billed_s = sum(r.s_boot for r in self.results)  # the capacity wait (S_wait) is not billed
        mean_price = statistics.fmean(p.per_hour for p in known if p.per_hour is not None) if known else None
        s_wait = [r.s_wait for r in self.results]
        s_boot = [r.s_boot for r in self.results]
        phases = {p: spread([r.phases[p] for r in self.results if p in r.phases]) for p in PHASES}
        return {
            "node": self.plane.node,
            "provider": self.outputs.provider,
            "region": self.outputs.region,
            "zone": self.outputs.zone,
            "instance_type": self.outputs.instance_type,
            "market": self.outputs.market,
            "run_id": self.outputs.run_id,
            "mode": self.mode,
            "cycles_requested": self.cycles,
            "outcome": self.outcome,
            "error": self.error,
            "leave": self.leave,
            "final_state": self.final_state,
            "cycles": [r.to_json() for r in self.results],
            "summary": {
                "cycles": len(self.results),
                "total_s": spread([r.total for r in self.results]),
                "s_wait_s": spread(s_wait),
                "s_boot_s": spread(s_boot),
                "phases": {p: v for p, v in phases.items() if v is not None},
            },
            "price": {
                "readings": [p.to_json() for p in self.prices],
                "currency": known[-1].currency if known else None,
                "source": self.prices[-1].source if self.prices else None,
                "min": min((p.per_hour for p in known if p.per_hour is not None), default=None),
                "max": max((p.per_hour for p in known if p.per_hour is not None), default=None),
                "last": known[-1].per_hour if known else None,
                "billed_estimate": billed_s / 3600 * mean_price if mean_price is not None else None,
            },
            "address_changed": [
                {"cycle": r.cycle, "from": r.address_before, "to": r.address_after}
                for r in self.results
                if r.address_changed
            ],
            "workload": {
                "restart": {
                    "wait_minutes": round(statistics.median(s_wait) / 60, 3) if s_wait else None,
                    "boot_minutes": round(statistics.median(s_boot) / 60, 3) if s_boot else None,
                }
            },
        }


# --- output -------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = " s") -> str:
    if value is None:
        return "-"
    return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}"


def _price_text(price: Mapping[str, Any] | None) -> str:
    if not price or price.get("per_hour") is None:
        return "unknown"
    return f"{price['per_hour']:g} {price['currency']}/h ({price['source']})"


def print_plan(plan: Mapping[str, Any], console: Console) -> None:
    table = Table(title="measure_restart: plan (nothing is changed without --yes)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    most = plan["most_it_can_cost"]
    rows = [
        ("node", f"{plan['node']} ({plan['provider']} {plan['region']} {plan['zone'] or ''}".strip() + ")"),
        ("instance type", f"{plan['instance_type']} ({plan['market']})"),
        ("state now", plan["state_now"]),
        ("cycles", f"{plan['cycles']} x {plan['mode']}, then leave {plan['leave']}"),
        ("price now", _price_text(plan["price_now"])),
        (
            "the most it can cost",
            "unknown (no price)"
            if most is None
            else f"{most:.4g} {plan['currency']} "
            f"({plan['max_billed_hours']:.2f} node-hours at the price now)",
        ),
        ("grant", json.dumps({k: v for k, v in plan["grant"].items() if v not in (None, [])})),
        ("budget left", "no budget" if plan["budget_left"] is None else f"{plan['budget_left']:.4g}"),
        ("record", plan["record"]),
    ]
    for what, value in rows:
        table.add_row(what, str(value))
    console.print(table)
    console.print("Run again with --yes to measure.")


def print_report(report: Mapping[str, Any], console: Console) -> None:
    cycles = report["cycles"]
    used = [p for p in PHASES if any(p in c["phases"] for c in cycles)]
    table = Table(title=f"Restart cost S: {report['node']} ({report['provider']}, {report['mode']})")
    table.add_column("cycle")
    for p in used:
        table.add_column(p, justify="right")
    for name in ("S_wait", "S_boot", "S"):
        table.add_column(name, justify="right", style="bold")
    table.add_column("address")
    for c in cycles:
        table.add_row(
            str(c["cycle"]),
            *(_fmt(c["phases"].get(p)) for p in used),
            _fmt(c["s_wait_s"]),
            _fmt(c["s_boot_s"]),
            _fmt(c["total_s"]),
            f"{c['address']['before']} -> {c['address']['after']}" if c["address"]["changed"] else "same",
        )
    summary = report["summary"]
    if cycles:
        for stat in ("median", "min", "max"):
            table.add_row(
                stat,
                *(_fmt(summary["phases"][p][stat]) if p in summary["phases"] else "-" for p in used),
                _fmt(summary["s_wait_s"][stat]),
                _fmt(summary["s_boot_s"][stat]),
                _fmt(summary["total_s"][stat]),
                "",
                style="dim",
            )
    console.print(table)
    price = report["price"]
    readings = price["readings"]
    console.print(
        f"price: {_price_text(readings[-1]) if readings else 'not read'}"
        + (
            f", from {price['min']:g} to {price['max']:g}"
            if price["min"] is not None and price["min"] != price["max"]
            else ""
        )
        + (
            f", billed during the measured restarts ~{price['billed_estimate']:.4g} {price['currency']}"
            if price["billed_estimate"] is not None
            else ""
        )
    )
    restart = report["workload"]["restart"]
    if restart["wait_minutes"] is not None:
        console.print(
            f"for the workload file: restart: {{wait_minutes: {restart['wait_minutes']}, "
            f"boot_minutes: {restart['boot_minutes']}}}"
        )
    line = f"outcome: {report['outcome']}, node left {report['final_state'] or 'unknown'}"
    console.print(line + (f" ({report['error']})" if report["error"] else ""))


def plot(report: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cycles = report["cycles"]
    used = [p for p in PHASES if any(p in c["phases"] for c in cycles)]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.8 * len(cycles) + 6), 4.5))
    labels = [str(c["cycle"]) for c in cycles]
    bottom = [0.0] * len(cycles)
    for phase in used:
        heights = [c["phases"].get(phase, 0.0) for c in cycles]
        ax.bar(labels, heights, bottom=bottom, label=PHASE_LABELS[phase])
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xlabel("cycle")
    ax.set_ylabel("seconds")
    ax.set_title(
        f"Restart phases per cycle ({report['provider']} {report['instance_type']}, {report['mode']})"
    )
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise MeasureError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


# --- entry point --------------------------------------------------------------------------------


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be > 0")
    return number


def _cycles(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a whole number >= 1")
    return int(value)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scripts.measure_restart",
        description="Measure the restart cost S on a deployed stack with forced stop/start cycles.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--stack", metavar="NAME", help="read `pulumi stack output --json` and the stack's grant"
    )
    src.add_argument("--outputs", metavar="FILE.json", help="the stack's outputs, as pulumi prints them")
    p.add_argument("--grant", metavar="FILE", help="a grant (YAML or JSON); overrides the stack's")
    p.add_argument("--stacks-dir", default="stacks", help="where Pulumi.NAME.yaml is (default: stacks)")
    p.add_argument("--node", help="which of the stack's node_ids (default: the first)")
    p.add_argument("--cycles", type=_cycles, default=3)
    p.add_argument("--mode", choices=("stop-start", "preempt"), default="stop-start")
    p.add_argument("--health-url", help="the model server's base URL (default: http://ADDRESS:server_port)")
    p.add_argument("--yes", action="store_true", help="really stop and start the node (else: show the plan)")
    p.add_argument("--leave", choices=("stopped", "running"), default="stopped")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="stacked bars of the phases per cycle")
    p.add_argument("--wait-ready", action="store_true", help="also wait for the agent's ready event")
    p.add_argument(
        "--price",
        type=_positive,
        metavar="PER_HOUR",
        help="the price when no API gives one (default: the stack's workload.prices for its market)",
    )
    p.add_argument("--fis-template", metavar="ID", help="AWS FIS experiment template for --mode preempt")
    p.add_argument("--gcp-project", help="GCP project of the instance (default: the stack's gcp.project)")
    p.add_argument("--azure-subscription", help="Azure subscription (default: AZURE_SUBSCRIPTION_ID)")
    p.add_argument("--azure-resource-group", help="default: the stack's azure.resource_group")
    p.add_argument("--k8s-namespace", help="default: the stack's k8s.namespace, else spot-eval")
    p.add_argument("--k8s-deployment", help="the model server's Deployment (default: RUN_ID-server)")
    p.add_argument("--poll", type=_positive, default=5.0, metavar="S", help="seconds between state reads")
    p.add_argument("--stop-timeout", type=_positive, default=900.0, metavar="S")
    p.add_argument("--start-timeout", type=_positive, default=1800.0, metavar="S")
    p.add_argument("--serve-timeout", type=_positive, default=1800.0, metavar="S")
    p.add_argument("--ready-timeout", type=_positive, default=900.0, metavar="S")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=140)  # a file or a pipe: no terminal width to fit
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return run(args, out, err)
    except (MeasureError, ControlPlaneError, GrantError, StoreError, RecordError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    inputs = load_inputs(args)
    outputs, grant = inputs.outputs, inputs.grant
    node = args.node or outputs.node_ids[0]
    if node not in outputs.node_ids:
        raise MeasureError(
            f"--node {node!r} is not among the stack's node_ids: {', '.join(outputs.node_ids)}"
        )
    grant.check_region(outputs.region, "outputs.region")
    grant.check_instance_type(outputs.instance_type, "outputs.instance_type")
    if args.mode == "preempt" and outputs.provider == "aws" and not args.fis_template:
        raise MeasureError(
            "--mode preempt on aws needs --fis-template ID (aws:ec2:send-spot-instance-interruptions)"
        )
    block = inputs.provider_block

    def from_block(key: str) -> str | None:
        value = block.get(key)
        return value if isinstance(value, str) and value else None

    config = PlaneConfig(
        configured_price=args.price if args.price is not None else inputs.configured_price,
        currency=grant.currency,
        poll_s=args.poll,
        fis_template_id=args.fis_template,
        gcp_billing_api_key=os.environ.get(GCP_KEY_ENV) or None,
        gcp_project=args.gcp_project or from_block("project"),
        azure_subscription=args.azure_subscription,
        azure_resource_group=args.azure_resource_group or from_block("resource_group"),
        k8s_namespace=args.k8s_namespace or from_block("namespace"),
        k8s_deployment=args.k8s_deployment,
    )
    plane = open_plane(outputs, node, config)
    store = Store(outputs.bucket_url)
    timeouts = Timeouts(args.stop_timeout, args.start_timeout, args.serve_timeout, args.ready_timeout)

    state = plane.state()
    price = plane.price_now()
    layout = RunLayout(outputs.run_id)
    budget_left = None
    if grant.budget is not None:
        events = read_events(store, store.list(layout.events_prefix), err)
        budget_left = grant.budget_left(events, fallback_price=price.per_hour)
    hours = args.cycles * timeouts.cycle_hours(args.wait_ready)
    plan = {
        "node": node,
        "provider": outputs.provider,
        "region": outputs.region,
        "zone": outputs.zone,
        "instance_type": outputs.instance_type,
        "market": outputs.market,
        "state_now": state.raw if state.raw == state.status else f"{state.status} ({state.raw})",
        "mode": args.mode,
        "cycles": args.cycles,
        "leave": args.leave,
        "price_now": price.to_json(),
        "currency": price.currency,
        "max_billed_hours": round(hours, 4),
        "most_it_can_cost": hours * price.per_hour if price.per_hour is not None else None,
        "grant": grant.to_json(),
        "budget_left": budget_left,
        "record": store.join(layout.events_prefix),
    }
    if not args.yes:
        if args.json:
            print(json.dumps({"plan": plan, "changed": False}, indent=2))
        else:
            print_plan(plan, out)
        return 0
    if state.status == "terminated":
        raise MeasureError(f"node {node} is {state.raw}: nothing to measure")

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True
    ) as progress:
        measurement = Measurement(
            plane,
            outputs,
            grant,
            store,
            mode=args.mode,
            cycles=args.cycles,
            leave=args.leave,
            timeouts=timeouts,
            health_url=args.health_url,
            wait_ready=args.wait_ready,
            poll_s=args.poll,
            progress=progress,
            console=err,
        )
        measurement.last_price = price
        code = measurement.run()
    report = measurement.report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, out)
    if args.plot and report["cycles"]:
        plot(report, Path(args.plot))
    if code:
        err.print(f"{PROG}: {report['outcome']}: {report['error']}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
