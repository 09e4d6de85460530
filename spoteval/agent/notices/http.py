"""HTTP to the instance metadata service (never through a proxy): the notice watchers' helper, also
used by the agent's price lookups."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import HTTPException

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]


def http(
    url: str,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 2.0,
) -> Reply:
    """One request; HTTP error statuses are replies; connection failures and replies that are not
    HTTP (a bad status line, a truncated body) raise OSError."""
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()})
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read() if exc.fp is not None else b""
        except (HTTPException, OSError):
            body = b""
        return Reply(exc.code, body, {k.lower(): v for k, v in (exc.headers or {}).items()})
    except HTTPException as exc:
        raise OSError(f"{url}: broken reply ({type(exc).__name__}: {exc})") from None
