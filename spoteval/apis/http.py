"""One HTTP request with the standard library, and JSON over HTTP.

`request` never goes through a proxy (the instance metadata service and the node's own endpoints
must not be proxied) and turns HTTP error statuses into replies. `json_object` is the JSON call the
price and event readers share: the parsed object, or the caller's error class with one line that
names the URL without its query (which may carry an API key).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]


def request(
    url: str,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 2.0,
) -> Reply:
    """One request, never through a proxy; HTTP error statuses are replies; connection failures and
    replies that are not HTTP (a bad status line, a truncated body) raise OSError."""
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


def json_object(
    url: str,
    error: type[Exception],
    *,
    token: str | None = None,
    body: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
    label: str = "",
) -> Mapping[str, Any]:
    """GET (or POST `body` as JSON) and parse a JSON object, with a bearer `token` when given.

    Failures raise `error` with one line: `{label}{URL without its query}: HTTP {code}: {body}`, or
    the connection's or the parser's complaint."""
    where = label + url.split("?", maxsplit=1)[0]
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json"} if token is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            obj = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()[:300].decode(errors="replace")
        raise error(f"{where}: HTTP {exc.code}: {text}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{where}: {exc}") from None
    if not isinstance(obj, dict):
        raise error(f"{where}: the answer is not a JSON object")
    return obj
