"""Day-two workflows a provider cannot do, refused while the stack config is parsed (before anything
is declared), each with one line naming the key. components/settings.py asks `node_refusal()` once
the node block is read and raises the answer as a `SettingsError`.

The workflows (README "Day two"): stop the node (`node.count: 0`), resume (`1`), a pool (`N > 1`),
flip the market (`node.market`), a static address (`node.address: static`), destroy keeping the
holds. Refused elsewhere, where the key is read: a market outside the provider's markets (Runpod:
spot only) and a dynamic address for a single Azure VM (components/settings.py `_node`), a pool on
the providers whose agent stops its own node through the API (Nebius, Runpod; settings `parse`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: provider -> why its node cannot keep a static address (spoteval/providers.py `address`)
NO_STATIC_ADDRESS: Final[Mapping[str, str]] = {
    "runpod": "a Runpod pod's address is tied to its host (and its public port differs from the "
    "private one): there is no static address; drop the key",
}


def node_refusal(provider: str, count: int, address: str, address_given: bool) -> tuple[str, str] | None:
    """(key, problem) when the node block asks for a workflow the provider cannot do, else None."""
    if address == "static" and provider in NO_STATIC_ADDRESS:
        return "node.address", NO_STATIC_ADDRESS[provider]
    if count > 1 and address == "static" and address_given:
        return (
            "node.address",
            "a pool's nodes come and go; only a single node gets a static address "
            "(drop the key, or set node.count to 0 or 1)",
        )
    return None
