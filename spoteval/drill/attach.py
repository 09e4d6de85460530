"""A second operator of a drill, started by hand: `python -m spoteval.drill operator DIR [--once]`.

The drill runs its operator under the run's lease (spoteval/operate/lease.py), as every operator
does, and writes what another operator needs into its folder (`DIR/operator.json`: the run, its
store, the lease's ttl, each node's agent config and folder). This command is the same operator
(spoteval.operate), against the same record, reaching the drill's nodes through their folders:

- while the drill's operator holds the lease it only reads, and says so in one line;
- once the drill is gone (killed: its lease expires after its ttl; or finished: it exits at once),
  it takes the lease and operates the nodes the drill left: a node's state is its init process
  (`init.json` beside its boot file, checked against the process's command line), a start runs
  the node's startup path again (spoteval/drill/node.py), a stop ends its processes. The drill's
  chaos died with the drill: nothing takes the nodes any more, and a start always finds capacity.

Exit codes: 0 checked (or only read, or the run is finished), 1 the grant refuses a start, 2 bad
input (no drill in DIR, a store that cannot be opened).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spoteval.cli import OneLineParser
from spoteval.clouds import ControlPlaneError, NodeState, Price
from spoteval.drill.config import DRILL_GRANT, OPERATOR_TIMING, SPOT_PRICE
from spoteval.drill.node import init_file, launch_node
from spoteval.drill.plane import PROVIDER, local_outputs
from spoteval.drill.procs import kill_node
from spoteval.operate.lease import OperatorLease, holder_name
from spoteval.operate.loop import Operator, blocked
from spoteval.record import RecordError
from spoteval.store import Store, StoreError

OPERATOR_FILE: Final = "operator.json"


class AttachError(Exception):
    """Bad input: names the folder or file."""


@dataclass(frozen=True)
class DrillNode:
    node: str
    config: Path  # the node's agent config (the same at every start)
    folder: Path  # its folder: boot file, init.json, logs


@dataclass(frozen=True)
class DrillRun:
    """What a drill writes for a second operator (`operator.json`)."""

    run_id: str
    store_url: str
    store_options: Mapping[str, Any]
    lease_ttl_s: float
    nodes: tuple[DrillNode, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "store_url": self.store_url,
            "store_options": dict(self.store_options),
            "lease_ttl_s": self.lease_ttl_s,
            "nodes": [{"node": n.node, "config": str(n.config), "folder": str(n.folder)} for n in self.nodes],
        }

    @classmethod
    def read(cls, folder: Path) -> DrillRun:
        path = folder / OPERATOR_FILE
        try:
            doc = json.loads(path.read_text())
            nodes = tuple(
                DrillNode(str(n["node"]), Path(n["config"]), Path(n["folder"])) for n in doc["nodes"]
            )
            return cls(
                run_id=str(doc["run_id"]),
                store_url=str(doc["store_url"]),
                store_options=dict(doc.get("store_options") or {}),
                lease_ttl_s=float(doc["lease_ttl_s"]),
                nodes=nodes,
            )
        except FileNotFoundError:
            raise AttachError(f"{path}: no such file (is {folder} the folder of a drill?)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AttachError(f"{path}: not a drill's operator file ({type(exc).__name__}: {exc})") from None


def write_operator_file(folder: Path, run: DrillRun) -> Path:
    path = folder / OPERATOR_FILE
    path.write_text(json.dumps(run.to_json(), indent=2) + "\n")
    return path


class AttachedPlane:
    """A drill node reached through its folder, from a process other than the drill's."""

    provider = PROVIDER
    restarts_itself = False
    can_stay_stopped = True

    def __init__(self, node: DrillNode, price: float = SPOT_PRICE) -> None:
        self.node = node.node
        self.config = node.config
        self.folder = node.folder
        self.price = price
        self.starts = 0
        self._children: list[subprocess.Popen[bytes]] = []

    def _pid(self) -> int | None:
        try:
            pid = json.loads(init_file(self.folder / "boot.json").read_text()).get("pid")
        except (OSError, ValueError, AttributeError):
            return None
        return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None

    def _alive(self, pid: int) -> bool:
        """The pid runs, is no zombie, and is this node's init (a pid the OS reused is not)."""
        for child in self._children:
            child.poll()  # reap the nodes this process started
        proc = Path(f"/proc/{pid}")
        if not Path("/proc/self/stat").exists():  # no /proc: the pid alone
            try:
                os.kill(pid, 0)
            except OSError:
                return False
            return True
        try:
            stat = (proc / "stat").read_text()
            argv = (proc / "cmdline").read_bytes()
        except OSError:
            return False
        zombie = stat[stat.rindex(")") + 2 :].split()[0] == "Z"
        return not zombie and str(self.folder / "boot.json").encode() in argv

    def state(self) -> NodeState:
        pid = self._pid()
        if pid is not None and self._alive(pid):
            return NodeState("running", "running")
        return NodeState("stopped", "not running")

    def price_now(self) -> Price:
        return Price(self.price, "USD", "configured", {"reason": "the drill's spot price"})

    def address(self) -> str | None:
        return "127.0.0.1" if self.state().running else None

    def start(self, timeout_s: float) -> None:
        if self.state().running:
            return
        self.starts += 1
        since = time.time()
        try:
            process = launch_node(self.config, self.folder, f"node-attached-{self.starts}.log")
        except OSError as exc:
            raise ControlPlaneError(f"local start {self.node}: {exc}") from None
        self._children.append(process)
        until = time.monotonic() + timeout_s
        while time.monotonic() < until and process.poll() is None:  # until the node notes its boot
            try:
                if init_file(self.folder / "boot.json").stat().st_mtime >= since:
                    return
            except OSError:
                pass
            time.sleep(0.02)

    def stop(self, timeout_s: float) -> None:
        pid = self._pid()
        if pid is None or not self._alive(pid):
            return
        kill_node(pid)
        until = time.monotonic() + timeout_s
        while time.monotonic() < until and self._alive(pid):
            time.sleep(0.02)

    def simulate_preemption(self, timeout_s: float) -> str:
        self.stop(timeout_s)
        return "kill"


def operator_for(run: DrillRun, *, say: Any = print) -> Operator:
    """The drill's operator (the same timing and grant as the drill's own), reaching its nodes
    through their folders, under the run's lease."""
    try:
        store = Store(run.store_url, run.store_options)
    except StoreError as exc:
        raise AttachError(str(exc)) from None
    planes = {n.node: AttachedPlane(n) for n in run.nodes}
    lease = OperatorLease(store, run.run_id, holder=holder_name("drill-operator"), ttl_s=run.lease_ttl_s)
    return Operator(
        local_outputs(run.run_id, run.store_url, tuple(planes)),
        planes,
        DRILL_GRANT,
        store,
        timing=OPERATOR_TIMING,
        start_timeout_s=30.0,
        say=say,
        lease=lease,
    )


def operator_main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m spoteval.drill operator",
        description="A second operator of a drill: only reads while the drill's operator holds the lease.",
    )
    parser.add_argument("folder", help="the drill's folder (its --out)")
    parser.add_argument("--once", action="store_true", help="check every node once, then exit")
    args = parser.parse_args(argv)

    last: dict[str, str] = {}

    def say(line: str) -> None:
        """Each line once: a node's line again only when it changed (checks come every second)."""
        key = line.split(":", 1)[0]
        if last.get(key) != line:
            last[key] = line
            print(line, flush=True)

    try:
        operator = operator_for(DrillRun.read(Path(args.folder)), say=say)
        lines = operator.once() if args.once else operator.run()
    except (AttachError, StoreError, RecordError) as exc:
        print(f"drill operator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("drill operator: interrupted", file=sys.stderr)
        return 130
    if any(blocked(line) for line in lines):  # (each line was said as it was checked)
        return 1
    return 0
