"""The settings' errors and reader: one line naming the key (`node.instance_type: ...`).

Every block of a stack's config (components/settings.py and the blocks it delegates: the stop
rules, the workload, each provider's own) is read with `reader` and refuses with `SettingsError`.
"""

from __future__ import annotations

from spoteval.config_reader import Reader


class SettingsError(ValueError):
    """A stack setting that is missing, malformed or outside the grant. `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class SettingsReader(Reader):
    """The config reader with the settings' wording; errors are `SettingsError`."""

    MISSING = "is required"


def reader(raw: object, where: str, known: frozenset[str] | None = None) -> SettingsReader:
    """A block of the stack config at `where`, refusing keys outside `known`."""
    return SettingsReader(raw, where, error=SettingsError, known=known)
