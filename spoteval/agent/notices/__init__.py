"""Interruption notices: one module per source behind one `Watcher` interface, plus SIGTERM for every
provider.

Each watcher runs in a daemon thread and calls `deliver(notice)` when the capacity is about to go.
The base URL comes from the config's `metadata_url` (tests point it at a fake); every URL, path,
header and notice length comes from the providers' fact modules (spoteval/providers/).

- base.py     `Notice`, the `Watcher` protocol, `WatchContext`, `PollingWatcher` (the shared loop)
- http.py     the metadata HTTP helper (never through a proxy; the price lookups use it too)
- aws.py      IMDSv2 spot instance-action and rebalance recommendation, polled every 5 s
- gcp.py      `instance/preempted` and `instance/maintenance-event`, each long-polled
- azure.py    Scheduled Events, polled every 1 s, acknowledged once in-flight work is recorded
- sigterm.py  SIGTERM and SIGINT as a `sigterm` notice
- k8s, nebius, runpod, local: no metadata endpoint; SIGTERM only.

A `sigterm` notice's deadline is the provider's usual grace before SIGKILL (`SIGTERM_GRACE_S`, or
the config's `sigterm_grace_s`).

Whatever a metadata service answers (a truncated body, bytes that are not HTTP, a 500, text that is
not UTF-8), a watcher logs it (throttled) and polls on; `start_watcher` also restarts a watcher
whose `watch` ends by an exception, so no notice source is ever silently gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from spoteval.agent.notices.aws import AwsWatcher
from spoteval.agent.notices.azure import EVENTS_PATH as AZURE_EVENTS_PATH
from spoteval.agent.notices.azure import STOPPING_EVENTS as AZURE_STOPPING_EVENTS
from spoteval.agent.notices.azure import AzureWatcher
from spoteval.agent.notices.base import (
    Deliver,
    Log,
    Notice,
    PollingWatcher,
    WatchContext,
    Watcher,
    stderr_log,
    what,
)
from spoteval.agent.notices.gcp import GcpWatcher
from spoteval.agent.notices.http import Reply, http
from spoteval.agent.notices.sigterm import SignalWatcher
from spoteval.providers import BY_KEY, REGISTRY, Metadata

#: the agent's own provider for a node on the user's machine (drills, tests): SIGTERM only
LOCAL: Final = "local"
LOCAL_SIGTERM_GRACE_S: Final = 10.0

#: the providers whose metadata service gives notice (the others send SIGTERM only)
_WITH_WATCHER: Final = tuple(
    key for key, facts in BY_KEY.items() if facts.metadata is not None and facts.metadata.poll_s is not None
)
DEFAULT_METADATA_URL: Final[Mapping[str, str]] = {
    key: metadata.base_url for key in _WITH_WATCHER if (metadata := BY_KEY[key].metadata) is not None
}
DEFAULT_POLL_S: Final[Mapping[str, float]] = {
    key: metadata.poll_s
    for key in _WITH_WATCHER
    if (metadata := BY_KEY[key].metadata) is not None and metadata.poll_s is not None
}
#: Seconds from a provider notice to reclaim when the notice itself carries no time.
NOTICE_S: Final[Mapping[str, float]] = {
    key: float(notice) for key in _WITH_WATCHER if (notice := BY_KEY[key].notice_s) is not None
}
RESTART_WATCHER_S: Final = 1.0  # a watcher that failed starts again after this long
#: Seconds from SIGTERM to SIGKILL the agent assumes per provider (conservative; spoteval/providers/)
SIGTERM_GRACE_S: Final[Mapping[str, float]] = {
    **{key: facts.sigterm_grace_s for key, facts in BY_KEY.items()},
    LOCAL: LOCAL_SIGTERM_GRACE_S,
}


def _no_metadata(ctx: WatchContext) -> Watcher | None:
    return None


#: the watcher of each metadata service that gives notice (a provider whose `NOTICES` is a metadata
#: service needs one here; the others send SIGTERM only)
_METADATA_WATCHERS: Final[Mapping[str, Callable[[WatchContext], Watcher | None]]] = {
    "aws": AwsWatcher,
    "gcp": GcpWatcher,
    "azure": AzureWatcher,
}
#: provider key (and `local`) -> its main metadata watcher
WATCHERS: Final[Mapping[str, Callable[[WatchContext], Watcher | None]]] = {
    **{
        key: _METADATA_WATCHERS[key] if isinstance(p.NOTICES, Metadata) else _no_metadata
        for key, p in REGISTRY.items()
    },
    LOCAL: _no_metadata,
}


def _gcp_maintenance(ctx: WatchContext) -> Watcher | None:
    return GcpWatcher(ctx, maintenance=True)


#: further metadata watchers per provider (one key each)
MORE_WATCHERS: Final[Mapping[str, Sequence[Callable[[WatchContext], Watcher | None]]]] = {
    "gcp": (_gcp_maintenance,),
}


def provider_watchers(
    provider: str, metadata_url: str | None, poll_s: float | None, log: Log
) -> list[Watcher]:
    """The provider's metadata watchers (none for providers that only send SIGTERM)."""
    first = WATCHERS.get(provider)
    if first is None:
        raise ValueError(f"unknown provider {provider!r} (known: {', '.join(WATCHERS)})")
    base = metadata_url or DEFAULT_METADATA_URL.get(provider, "")
    ctx = WatchContext(provider, base.rstrip("/"), poll_s or DEFAULT_POLL_S.get(provider, 5.0), log)
    made = [make(ctx) for make in (first, *MORE_WATCHERS.get(provider, ()))]
    return [w for w in made if w is not None]


def provider_watcher(
    provider: str, metadata_url: str | None, poll_s: float | None, log: Log
) -> Watcher | None:
    """The provider's main metadata watcher (None for providers that only send SIGTERM)."""
    found = provider_watchers(provider, metadata_url, poll_s, log)
    return found[0] if found else None


def start_watcher(
    watcher: Watcher, deliver: Deliver, stopping: threading.Event, log: Log = lambda message: None
) -> threading.Thread:
    """Run `watcher.watch` in a daemon thread; if it ends by an exception (any), log it and start it
    again after `RESTART_WATCHER_S`, until `stopping` is set."""

    def supervise() -> None:
        while not stopping.is_set():
            try:
                watcher.watch(deliver, stopping)
                return
            except BaseException as exc:  # a watcher must never be silently gone
                log(f"notice watcher {watcher.name} failed: {what(exc)}; restarting it")
                stopping.wait(RESTART_WATCHER_S)

    thread = threading.Thread(target=supervise, name=f"notice-{watcher.name}", daemon=True)
    thread.start()
    return thread


__all__ = [
    "AZURE_EVENTS_PATH",
    "AZURE_STOPPING_EVENTS",
    "DEFAULT_METADATA_URL",
    "DEFAULT_POLL_S",
    "NOTICE_S",
    "SIGTERM_GRACE_S",
    "WATCHERS",
    "AwsWatcher",
    "AzureWatcher",
    "Deliver",
    "GcpWatcher",
    "Log",
    "Notice",
    "PollingWatcher",
    "Reply",
    "SignalWatcher",
    "WatchContext",
    "Watcher",
    "http",
    "provider_watcher",
    "provider_watchers",
    "start_watcher",
    "stderr_log",
]
