"""The drill's provider as a control plane: the local node process, behind the same `ControlPlane`
interface as a cloud's node, so the operator (spoteval.operate) restarts it exactly as it restarts a
GCP VM or a Runpod pod.

- `start()` launches the node's startup path (`python -m spoteval.drill node ...`); while the chaos
  controller holds the capacity back (after it took the node) it raises `CapacityError`, as a
  provider does when it has no spot capacity.
- `stop()` ends every process of the node (what a provider's stop does to a VM).
- `state()`: `running` while the node's startup process lives, or while the provider still holds a
  node whose notice it sent (the machine is there until it is taken, whatever its agent does), else
  `stopped` (its raw word says why: `never started`, `taken`, `exited (CODE)`, `stopped`).
- `hold()` / `take(capacity_delay_s)` are the chaos controller's side: the notice is out, then the
  node is gone and capacity comes back after the delay. `simulate_preemption()` takes it at once.
- `price_now()`: the drill's configured spot price (no price API).

Each start is one `Launch` (its number and its launch time, on the wall clock and the plane's),
published by one assignment once the process exists, so a reader that sees a new start number sees
that start's launch time with it: the chaos controller reads `latest` without the plane's lock, and
a start holds the lock only while it launches, never while it waits for the node's boot (other
nodes' notices do not wait for one node's boot).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from spoteval.agent.procgroup import NOTED_FILE, remove_noted
from spoteval.clouds import CapacityError, ControlPlaneError, NodeState, Price, StackOutputs
from spoteval.drill.config import NODE_ID, NODE_PLACE, SPOT_PRICE
from spoteval.drill.procs import kill_node
from spoteval.record import utc_now

PROVIDER: Final = "local"


def local_outputs(run_id: str, store_url: str, node_ids: tuple[str, ...] = (NODE_ID,)) -> StackOutputs:
    """The drill's "stack outputs": what a real stack exports, for the local node(s)."""
    return StackOutputs(
        provider=NODE_PLACE["provider"],
        region=NODE_PLACE["region"],
        zone=NODE_PLACE["zone"],
        node_ids=node_ids,
        instance_type=NODE_PLACE["instance_type"],
        market=NODE_PLACE["market"],
        bucket_url=store_url,
        run_id=run_id,
        server_port=0,
        address_kind="private",
    )


@dataclass(frozen=True)
class Launch:
    """One start of the node: its number (1, 2, ...) and when it was launched."""

    number: int
    at: datetime
    at_mono: float  # the plane's clock


class LocalPlane:
    provider = PROVIDER
    restarts_itself = False
    can_stay_stopped = True

    def __init__(
        self,
        launch: Callable[[int], subprocess.Popen[bytes]],
        *,
        node: str = NODE_ID,
        price: float = SPOT_PRICE,
        clock: Callable[[], float] = time.monotonic,
        boot_file: Path | None = None,
    ) -> None:
        self.node = node
        self.boot_file = boot_file
        self.launch = launch
        self.price = price
        self.clock = clock
        self.process: subprocess.Popen[bytes] | None = None
        self.latest: Launch | None = None  # replaced whole by each start (read without the lock)
        self.capacity_at = 0.0
        self.last_stop = "never started"
        self.held = False  # a notice is out: the node stays until the provider takes it
        #: the operator (its own thread) and the chaos controller act on the node one at a time
        self.lock = threading.RLock()
        self._exits: list[tuple[int, int | None]] = []  # (start number, exit code) not yet taken

    # --- reading ----------------------------------------------------------------------------------

    @property
    def starts(self) -> int:
        latest = self.latest
        return 0 if latest is None else latest.number

    @property
    def launched(self) -> datetime | None:
        latest = self.latest
        return None if latest is None else latest.at

    def state(self) -> NodeState:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return NodeState("running", "running")
            if self.held:
                return NodeState("running", "running (notice sent)")
            self._note_exit()
            return NodeState("stopped", self.last_stop)

    def _note_exit(self) -> None:
        if (
            not self.held
            and self.process is not None
            and self.last_stop == "running"
            and self.process.poll() is not None
        ):
            self.last_stop = f"exited ({self.process.returncode})"
            self._exits.append((self.starts, self.process.returncode))

    def exits(self) -> list[tuple[int, int | None]]:
        """The node's processes that ended by themselves since the last call: (start number, code)."""
        with self.lock:
            self._note_exit()
            out, self._exits = self._exits, []
            return out

    def price_now(self) -> Price:
        return Price(self.price, "USD", "configured", {"reason": "the drill's spot price"})

    def address(self) -> str | None:
        return "127.0.0.1" if self.state().running else None

    # --- acting -----------------------------------------------------------------------------------

    def start(self, timeout_s: float) -> None:
        with self.lock:
            if self.state().running:
                return
            wait = self.capacity_at - self.clock()
            if wait > 0:
                raise CapacityError(
                    f"local start {self.node}: no capacity now (it comes back in {wait:.1f} s)"
                )
            launch = Launch(self.starts + 1, utc_now(), self.clock())
            try:
                process = self.launch(launch.number)
            except OSError as exc:
                raise ControlPlaneError(f"local start {self.node}: {exc}") from None
            self.process = process
            self.latest = launch  # the start number and its launch time, together
            self.last_stop = "running"
            self.held = False
        self._await_boot(process, launch.at.timestamp(), timeout_s)

    def _await_boot(self, process: subprocess.Popen[bytes], since: float, timeout_s: float) -> None:
        """Return once the node's startup process noted its boot (a cloud's start returns once the
        machine runs), it ended, or `timeout_s` passed."""
        if self.boot_file is None:
            return
        until = time.monotonic() + timeout_s
        while time.monotonic() < until and process.poll() is None:
            try:
                if self.boot_file.stat().st_mtime >= since:
                    return
            except OSError:
                pass
            time.sleep(0.02)

    def _end(self, why: str) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                kill_node(self.process.pid)
                self.process.wait(timeout=30)
            # as the machine's reboot would: what its model server held in /dev/shm goes too
            folder = self.boot_file.parent if self.boot_file is not None else None
            for noted in folder.glob(f"work/*/{NOTED_FILE}") if folder is not None else ():
                remove_noted(str(noted))
            self.held = False
            self.last_stop = why

    def hold(self) -> None:
        """The notice is out: the node stays the provider's to take, even if its agent exits."""
        with self.lock:
            self.held = True

    def release(self) -> None:
        """The provider lets a node whose agent finished go without taking it."""
        with self.lock:
            self.held = False
            self._note_exit()

    def stop(self, timeout_s: float) -> None:
        self._end("stopped")

    def take(self, capacity_delay_s: float) -> None:
        """The chaos controller takes the node: gone now, no capacity for `capacity_delay_s`."""
        with self.lock:
            self._end("taken")
            self.capacity_at = self.clock() + capacity_delay_s

    def simulate_preemption(self, timeout_s: float) -> str:
        self.take(0.0)
        return "kill"
