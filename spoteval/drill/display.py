"""The drill's progress: a live bar and a status line on a terminal, plain time-stamped lines when piped."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO


def _status_progress() -> Any:
    """A rich Progress with a status line under the bar (episodes done, interruptions, restarts)."""
    from rich.progress import Progress
    from rich.text import Text

    class StatusProgress(Progress):
        status = ""

        def get_renderables(self) -> Iterator[Any]:
            yield self.make_tasks_table(self.tasks)
            yield Text(self.status)

    return StatusProgress


class Display:
    """Progress: a live bar and status line on a terminal; plain time-stamped lines when piped."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream or sys.stdout, highlight=False)
        if not self.console.is_terminal:
            self.console = Console(file=stream or sys.stdout, highlight=False, width=130, soft_wrap=True)
        self.live = self.console.is_terminal
        self.t0 = time.monotonic()
        self.total = total
        self.last_plain = 0.0
        self.progress = _status_progress()(
            TextColumn("episodes done"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.live,
        )
        self.task = self.progress.add_task("drill", total=total)

    def __enter__(self) -> Display:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def log(self, message: str) -> None:
        self.console.print(f"[{time.monotonic() - self.t0:6.1f} s] {message}", markup=False)

    def set_total(self, total: int) -> None:
        self.total = total
        self.progress.update(self.task, total=total)

    def update(self, done: int, status: str) -> None:
        self.progress.status = status
        self.progress.update(self.task, completed=done)
        now = time.monotonic()
        if not self.live and now - self.last_plain >= 10.0:
            self.last_plain = now
            self.log(f"{done}/{self.total} episodes done; {status}")
