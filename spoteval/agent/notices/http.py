"""HTTP to the instance metadata service (never through a proxy): the notice watchers' helper, also
used by the agent's price lookups; written once in `spoteval.apis.http`."""

from __future__ import annotations

from spoteval.apis.http import Reply
from spoteval.apis.http import request as http

__all__ = ["Reply", "http"]
