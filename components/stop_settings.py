"""The `stop:` block of a stack: the stop rules the node and the provider enforce, within the grant.

`max_runtime_hours` and `idle_minutes` may tighten the grant's, never loosen them; `on_done` is how
the node stops when the run is done (`poweroff`, `exit`, or `api_stop`: through the provider's API),
checked against what stops this provider's node (spoteval/providers.py); `notify_emails` receive
the budget alert where the stack declares one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from components.setting_errors import SettingsError, SettingsReader
from spoteval.grant import Grant
from spoteval.providers import BY_KEY

STOP_KEYS: Final = frozenset({"max_runtime_hours", "idle_minutes", "on_done", "notify_emails"})
#: api_stop: the agent stops the node through the provider's API (Runpod)
ON_DONE: Final = ("exit", "poweroff", "api_stop")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class StopSettings:
    max_runtime_hours: float | None
    idle_minutes: float | None
    on_done: str  # exit | poweroff
    notify_emails: tuple[str, ...]

    @property
    def max_runtime_s(self) -> int | None:
        return None if self.max_runtime_hours is None else round(self.max_runtime_hours * 3600)

    @property
    def idle_s(self) -> int | None:
        return None if self.idle_minutes is None else round(self.idle_minutes * 60)


def _default_on_done(provider: str) -> str:
    """api_stop where the API stops the node, exit where powering off would not, else poweroff."""
    facts = BY_KEY[provider]
    if facts.api_stop:
        return "api_stop"
    if facts.os_poweroff is not None or facts.os_poweroff_billed is not None:
        return "exit"
    return "poweroff"


def parse_stop(block: SettingsReader, provider: str, budget_alerts: bool, grant: Grant) -> StopSettings:
    """The `stop:` block: it may tighten the grant's runtime and idle rules, never loosen them; its
    `on_done` must stop this provider's node; a budget alert (`budget_alerts`) needs recipients."""
    facts = BY_KEY[provider]
    max_runtime = block.opt_number("max_runtime_hours", positive=True)
    if max_runtime is None:
        max_runtime = grant.max_runtime_hours
    elif grant.max_runtime_hours is not None and max_runtime > grant.max_runtime_hours:
        raise SettingsError(
            "stop.max_runtime_hours",
            f"{max_runtime} is above the grant's max_runtime_hours {grant.max_runtime_hours}",
        )
    idle = block.opt_number("idle_minutes", positive=True)
    if idle is None:
        idle = grant.idle_minutes
    elif grant.idle_minutes is not None and idle > grant.idle_minutes:
        raise SettingsError(
            "stop.idle_minutes", f"{idle} is above the grant's idle_minutes {grant.idle_minutes}"
        )
    on_done = block.choice("on_done", ON_DONE, _default_on_done(provider))
    if (on_done == "api_stop") != facts.api_stop and on_done != "exit":
        raise SettingsError(
            "stop.on_done",
            f"{on_done} does not stop a {provider} node; use "
            + ("api_stop (through the provider's API) or exit" if facts.api_stop else "poweroff or exit"),
        )
    if on_done == "poweroff" and facts.os_poweroff_billed is not None:
        raise SettingsError(
            "stop.on_done", f"{facts.os_poweroff_billed}; use exit (and deallocate from outside)"
        )
    if on_done == "poweroff" and facts.os_poweroff is not None:
        # the first clause of the reason ("a pod cannot power off its node")
        raise SettingsError("stop.on_done", f"{facts.os_poweroff.split(';')[0]}; use exit")
    emails = block.strings("notify_emails")
    for email in emails:
        if not _EMAIL.match(email):
            raise SettingsError("stop.notify_emails", f"{email!r} is not an email address")
    if grant.budget is not None and budget_alerts and not emails:
        raise SettingsError(
            "stop.notify_emails",
            f"is required on {provider} when the grant has a budget (the budget alert's recipients)",
        )
    return StopSettings(
        max_runtime_hours=max_runtime, idle_minutes=idle, on_done=on_done, notify_emails=emails
    )
