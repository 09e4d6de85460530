"""Provider key (stack config `spot-eval:provider`) -> the module that declares its resources.

Each module offers `build(settings, context) -> StackOutputs` (the `ProviderModule` protocol in
components/base.py) and `parse_settings(block)`, the parse of its own block of the stack config
(`aws:`, `gcp:`, ...; components/settings.py calls it). A module is imported only when its provider
is asked for, so a stack never imports another provider's SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Final

#: provider key -> module
MODULES: Final[Mapping[str, str]] = {
    "aws": "components.aws",
    "gcp": "components.gcp",
    "azure": "components.azure",
    "k8s": "components.kubernetes",
    "nebius": "components.nebius",
    "runpod": "components.runpod",
}


def provider_module(key: str) -> ModuleType:
    """The provider's module (KeyError for a key that is not a provider's)."""
    return importlib.import_module(MODULES[key])
