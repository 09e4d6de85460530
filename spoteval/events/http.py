"""A JSON call over HTTP with a bearer token, for the readers that speak a provider's REST API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from spoteval.events.base import EventsError


def call_json(url: str, token: str, body: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """GET (or POST `body`) and parse a JSON object; errors name the URL without its query."""
    where = url.split("?", maxsplit=1)[0]
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(
        url, data=data, headers=headers, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            obj = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()[:300].decode(errors="replace")
        raise EventsError(f"{where}: HTTP {exc.code}: {text}") from None
    except (OSError, ValueError) as exc:
        raise EventsError(f"{where}: {exc}") from None
    if not isinstance(obj, dict):
        raise EventsError(f"{where}: the answer is not a JSON object")
    return obj
