"""When the node booted, as the OS tells it, and what the agent derives from that.

- `boot_times`: machine boot -> agent process start, from the startup script's boot file (which
  also times boot -> startup script -> agent), else from /proc.
- `billed_from`: machine boot on providers that bill from boot (spoteval/providers.py), else the
  agent's start: where this incarnation's billed time begins.
- `ready_details`: the `ready` event's timings (boot, server healthy, first dispatch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spoteval.providers import BILLED_FROM_BOOT
from spoteval.record import RecordError, parse_time, utc_now


@dataclass(frozen=True)
class BootTimes:
    """Where the OS tells it: machine boot -> agent process start."""

    boot_to_agent_s: float | None
    source: str | None
    extra: Mapping[str, float] = field(default_factory=dict)
    boot_time: datetime | None = None


def boot_times(boot_file: str, agent_started: datetime) -> BootTimes:
    """From the startup script's boot file, else from /proc (process start time since boot)."""
    try:
        with open(boot_file, encoding="utf-8") as f:
            doc = json.load(f)
        boot = parse_time(doc["boot_time"])
        extra: dict[str, float] = {}
        if isinstance(doc.get("startup_script_started"), str):
            script = parse_time(doc["startup_script_started"])
            extra["boot_to_startup_script_s"] = round((script - boot).total_seconds(), 3)
            extra["startup_script_to_agent_s"] = round((agent_started - script).total_seconds(), 3)
        return BootTimes(round((agent_started - boot).total_seconds(), 3), "boot_file", extra, boot)
    except (OSError, ValueError, KeyError, TypeError, RecordError):
        pass
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22: process start time, in clock ticks after boot
        seconds = ticks / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        # boot = now - uptime; the process started `seconds` after boot
        boot = utc_now() - timedelta(seconds=uptime)
        return BootTimes(round(seconds, 3), "proc", {}, boot)
    except (OSError, ValueError, IndexError):
        return BootTimes(None, None)


def billed_from(provider: str, boot: BootTimes, agent_started: datetime) -> datetime:
    """Machine boot on VM providers (billed from boot), else the agent's start."""
    if provider in BILLED_FROM_BOOT and boot.boot_time is not None:
        return min(boot.boot_time, agent_started)
    return agent_started


def ready_details(
    boot: BootTimes,
    started_mono: float,
    *,
    healthy_mono: float | None,
    first_dispatch_mono: float | None,
    record_read_s: float,
    server_started_by_agent: bool,
) -> dict[str, Any]:
    """The `ready` event's details: boot -> agent, then agent start -> server healthy -> first dispatch."""

    def since_start(mono: float | None) -> float | None:
        return None if mono is None else round(mono - started_mono, 3)

    return {
        "boot_to_agent_s": boot.boot_to_agent_s,
        "boot_source": boot.source,
        **boot.extra,
        "agent_to_server_healthy_s": since_start(healthy_mono),
        "agent_to_first_dispatch_s": since_start(first_dispatch_mono),
        "server_healthy_to_first_dispatch_s": (
            None
            if healthy_mono is None or first_dispatch_mono is None
            else round(first_dispatch_mono - healthy_mono, 3)
        ),
        "record_read_s": round(record_read_s, 3),
        "server_started_by_agent": server_started_by_agent,
    }
