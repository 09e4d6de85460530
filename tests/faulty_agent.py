"""The agent as a process, with obstore made to fail: `python -m tests.faulty_agent --panics N -- ARGS`.

obstore is Rust underneath; a panic inside it reaches Python as `pyo3_runtime.PanicException`, which
derives from `BaseException`, not `Exception`. This wrapper replaces `obstore.put` so that its
first N calls on a key under `results/` raise such an exception (the same class shape: a
`BaseException` subclass named PanicException), then runs `python -m spoteval.agent ARGS`.

`--die-before-result K` instead kills the agent outright (SIGKILL of its own process) at its K-th
write of a result: its uploader has just written that attempt under `attempts/` (the attempt goes
first), so the node is lost between an attempt write and its result write. The line
`faulty_agent: dying before results/EPISODE.json` names the episode.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import obstore


class PanicException(BaseException):
    """Stands in for pyo3_runtime.PanicException (a BaseException, like the real one)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faulty_agent")
    parser.add_argument("--panics", type=int, default=1, help="panics on the first N puts of results")
    parser.add_argument("--die-before-result", type=int, default=0, help="SIGKILLs itself at the Kth")
    parser.add_argument("agent_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    agent_args = [a for a in args.agent_args if a != "--"]
    lock = threading.Lock()
    left = {"n": 0 if args.die_before_result else args.panics, "die": args.die_before_result}
    real_put = obstore.put

    def put(store: Any, path: str, *a: Any, **kw: Any) -> Any:
        if "/results/" in str(path):
            with lock:
                left["die"] -= 1
                if left["die"] == 0:
                    name = str(path).rsplit("/", 1)[-1]
                    print(f"faulty_agent: dying before results/{name}", file=sys.stderr, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                panic = left["n"] > 0
                left["n"] -= 1 if panic else 0
            if panic:
                print(f"faulty_agent: panicking on put {path}", file=sys.stderr, flush=True)
                raise PanicException("called `Option::unwrap()` on a `None` value")
        return real_put(store, path, *a, **kw)

    obstore.put = put
    from spoteval.agent.__main__ import main as agent_main

    return agent_main(agent_args)


if __name__ == "__main__":
    raise SystemExit(main())
