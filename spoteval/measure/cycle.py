"""The measurement: stop/start (or preemption) cycles, each phase timed, every change in the record."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import Progress

from spoteval.clouds import (
    ControlPlane,
    ControlPlaneError,
    NodeState,
    Price,
    StackOutputs,
    wait_for,
)
from spoteval.grant import Grant, GrantError, Refusal
from spoteval.measure.phases import BOOT_PHASES, PHASES, PROG, WAIT_PHASES, HealthError, Refused
from spoteval.measure.probe import first_token, read_events, wait_models
from spoteval.record import Event, RecordError, RunLayout, utc_now
from spoteval.store import Store, StoreError

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
            # the model server's own start-up phases, as the node's agent read them from its log
            "server_phases": server_phases_of(self.agent),
        }


def server_phases_of(ready: Mapping[str, Any] | None) -> dict[str, float]:
    """The `ready` event's `server_phases` (seconds by phase), numbers only; {} without."""
    raw = (ready or {}).get("server_phases")
    if not isinstance(raw, Mapping):
        return {}
    return {
        str(k): float(v) for k, v in raw.items() if isinstance(v, int | float) and not isinstance(v, bool)
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
        event = self.outputs.event(
            utc_now(),
            self.plane.node,
            kind,
            reason,
            price=price,
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
