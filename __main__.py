"""spot-eval's Pulumi program: load the stack's settings, pick the provider's module, build, export."""

from __future__ import annotations

import importlib
from typing import Final, cast

import pulumi

from components.common import ProviderModule, build_context
from components.settings import SettingsError, load

#: provider key (stack config `spot-eval:provider`) -> the module that declares its resources
PROVIDER_MODULES: Final = {
    "aws": "components.aws",
    "gcp": "components.gcp",
    "azure": "components.azure",
    "k8s": "components.kubernetes",
    "nebius": "components.nebius",
    "runpod": "components.runpod",
}

try:
    settings = load()
    module = cast(ProviderModule, importlib.import_module(PROVIDER_MODULES[settings.provider]))
    outputs = module.build(settings, build_context(settings))
except SettingsError as exc:
    # One line naming the key, no traceback: nothing has been declared that depends on a bad setting.
    raise pulumi.RunError(f"stack config spot-eval:{exc}") from None
outputs.export(settings)
