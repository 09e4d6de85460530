"""spot-eval's Pulumi program: load the stack's settings, pick the provider's module, build, export."""

from __future__ import annotations

from typing import cast

import pulumi

from components.base import ProviderModule, build_context
from components.registry import provider_module
from components.settings import SettingsError, load

try:
    settings = load()
    module = cast(ProviderModule, provider_module(settings.provider))
    outputs = module.build(settings, build_context(settings))
except SettingsError as exc:
    # One line naming the key, no traceback: nothing has been declared that depends on a bad setting.
    raise pulumi.RunError(f"stack config spot-eval:{exc}") from None
outputs.export(settings)
