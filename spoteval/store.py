"""Object storage by URL (s3://, gs://, az://, file://, memory://) with create-only writes.

`Store` is the one way spot-eval code reaches the run record. Keys are relative to the store URL's
prefix, e.g. `Store.open("s3://bucket/evals").put_new("runs/r1/results/e1.json", b"...")` writes
`s3://bucket/evals/runs/r1/results/e1.json`.

Options (`store_options` in the agent's config) are passed through to obstore: client options such
as `allow_http`, `timeout`, `connect_timeout` go to the HTTP client; `max_retries`, `retry_timeout`
and `init_backoff_s` to the retry policy; everything else (`endpoint`, `region`,
`access_key_id`, `secret_access_key`, `account_name`, `use_emulator`, ...) to the store itself.
Absent keys come from the standard environment (AWS_*, GOOGLE_*, AZURE_* variables, instance
identity), as obstore reads them.

Create-only writes (`put_new`) rely on the service: S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`,
Azure `If-None-Match: *`, a local file opened exclusively. The GCS emulator used in tests does not
enforce preconditions; real GCS does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlparse

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import from_url

#: the obstore the project needs, the one pin: the node installs it (components/startup.py), and
#: pyproject.toml and requirements.txt say the same (tests/test_obstore_pin.py)
OBSTORE_REQUIREMENT: Final = "obstore>=0.12.1"
SCHEMES: Final = ("s3", "gs", "az", "file", "memory")
_CLIENT_KEYS: Final = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "timeout",
        "read_timeout",
        "user_agent",
    }
)
_RETRY_KEYS: Final = frozenset({"max_retries", "retry_timeout", "init_backoff_s", "max_backoff_s"})


class StoreError(Exception):
    """The store cannot be opened or did not answer; the message names the URL or key.

    `permanent` is True when retrying cannot help: access denied, bad credentials, a bad request, or
    a bucket/container that does not exist (the service answered, and said no).
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


#: HTTP statuses after which a retry cannot succeed (as the store clients report them)
_PERMANENT_STATUS: Final = ("400 Bad Request", "401 Unauthorized", "403 Forbidden")


#: what to set when the endpoint is plain http, per scheme (the store client refuses http by default)
_ALLOW_HTTP: Final = {"s3": "AWS_ALLOW_HTTP=true", "az": "AZURE_ALLOW_HTTP=true"}
_PLAIN_HTTP: Final = re.compile(r"(http://[^\s/]+)[^\s]*.*builder error", re.DOTALL)


def plain_http_hint(url: str, text: str) -> str:
    """The fix when the store client refused a plain-http endpoint ('builder error'), else ''."""
    found = _PLAIN_HTTP.search(text)
    if found is None:
        return ""
    setting = _ALLOW_HTTP.get(urlparse(url).scheme)
    how = (
        f"set {setting}, or the store option allow_http: true"
        if setting
        else "set store option allow_http: true"
    )
    return f" (the endpoint {found.group(1)} is plain http: {how})"


def _failed(what: str, exc: BaseException, *, missing_is_permanent: bool = False) -> StoreError:
    """A StoreError for a failed operation, marked permanent when retrying cannot help."""
    text = str(exc)
    permanent = isinstance(exc, PermissionDeniedError | UnauthenticatedError) or any(
        f"status code: {status}" in text for status in _PERMANENT_STATUS
    )
    if missing_is_permanent and (isinstance(exc, FileNotFoundError) or "404 Not Found" in text):
        permanent = True  # a write (or a listing) answered 404: the bucket or container is missing
    hint = plain_http_hint(what.split(" ", 1)[-1], text)
    return StoreError(f"{what}: {_short(exc)}{hint}", permanent=permanent)


def _duration(value: object, key: str) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise StoreError(f"store_options.{key}: must be a number of seconds >= 0, got {value!r}")
    return timedelta(seconds=float(value))


def check_url(url: object) -> str:
    """A store URL with a known scheme and a bucket/container/path; raises StoreError otherwise."""
    if not isinstance(url, str) or "://" not in url:
        raise StoreError(
            f"store URL {url!r} must look like s3://bucket/prefix, gs://, az://container/, file:///path"
        )
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES:
        raise StoreError(f"store URL {url!r}: unknown scheme {parsed.scheme!r} (known: {', '.join(SCHEMES)})")
    if parsed.scheme in ("s3", "gs", "az") and not parsed.netloc:
        raise StoreError(f"store URL {url!r} names no bucket or container")
    if parsed.scheme == "file" and (
        parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/")
    ):
        raise StoreError(f"store URL {url!r}: file URLs need an absolute path (file:///path)")
    return url


class Store:
    """A bucket (or folder) addressed by URL; all keys are relative to the URL's prefix."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self.url = check_url(url).rstrip("/") + "/"
        opts = dict(options or {})
        client: dict[str, Any] = {}
        retry: dict[str, Any] = {}
        config: dict[str, Any] = {}
        for key, value in opts.items():
            if key in _CLIENT_KEYS:
                timeout = key.endswith("timeout") and not isinstance(value, str)
                client[key] = _duration(value, key) if timeout else value
            elif key in _RETRY_KEYS:
                retry[key] = value
            elif value is not None:
                config[key] = value
        scheme = urlparse(self.url).scheme
        kwargs: dict[str, Any] = {}
        if scheme == "file":
            path = urlparse(self.url).path
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"store URL {url!r}: cannot create folder: {exc}") from None
        elif scheme != "memory":
            if client:
                kwargs["client_options"] = client
            if retry:
                kwargs["retry_config"] = {
                    "max_retries": int(retry.get("max_retries", 3)),
                    "retry_timeout": _duration(retry.get("retry_timeout", 30), "retry_timeout"),
                    "backoff": {
                        "init_backoff": _duration(retry.get("init_backoff_s", 0.1), "init_backoff_s"),
                        "max_backoff": _duration(retry.get("max_backoff_s", 5), "max_backoff_s"),
                        "base": 2.0,
                    },
                }
            kwargs.update(config)
        elif config or client:
            raise StoreError(f"store URL {url!r}: memory stores take no options")
        try:
            self._store = from_url(self.url, **kwargs)
        except (BaseError, ValueError, TypeError) as exc:
            raise StoreError(f"store {url!r} cannot be opened: {_short(exc)}") from None

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def join(self, key: str) -> str:
        """The full URL of a key (for messages and reports)."""
        return self.url + key

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None
        except (BaseError, OSError) as exc:
            raise _failed(f"get {self.join(key)}", exc) from None

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self._store, key)
        except FileNotFoundError:
            return False
        except (BaseError, OSError) as exc:
            raise _failed(f"head {self.join(key)}", exc) from None
        return True

    def put_new(self, key: str, data: bytes) -> bool:
        """Create-only write: True if this call created the object, False if it already existed."""
        try:
            obstore.put(self._store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        except (BaseError, OSError) as exc:
            raise _failed(f"put {self.join(key)}", exc, missing_is_permanent=True) from None
        return True

    def put(self, key: str, data: bytes) -> None:
        """Overwrite (or create) an object. The run record never needs this; reports and bundles may."""
        try:
            obstore.put(self._store, key, data)
        except (BaseError, OSError) as exc:
            raise _failed(f"put {self.join(key)}", exc, missing_is_permanent=True) from None

    def list(self, prefix: str, offset: str | None = None) -> list[str]:
        """Every key under `prefix` (recursively), sorted; with `offset`, only the keys after it."""
        keys: list[str] = []
        try:
            for batch in obstore.list(self._store, prefix=prefix, offset=offset, chunk_size=1000):
                keys.extend(str(meta["path"]) for meta in batch)
        except FileNotFoundError:
            return []
        except (BaseError, OSError) as exc:
            raise _failed(f"list {self.join(prefix)}", exc, missing_is_permanent=True) from None
        return sorted(keys)


#: the code and message of an S3 or Azure XML error body (`<Error><Code>NoSuchBucket</Code><Message>...`)
_XML_ERROR: Final = re.compile(r"<Code>([^<]+)</Code>\s*<Message>([^<]*)</Message>")


def _short(exc: BaseException) -> str:
    """First line of an obstore error (they carry multi-line debug dumps); an XML error body that
    the first line only begins (`404 Not Found: <?xml ...?>`) is given as its code and message."""
    raw = str(exc).strip()
    text = raw.splitlines()
    if not text:
        return type(exc).__name__
    first = text[0]
    body = _XML_ERROR.search(raw)
    start = first.find("<?xml")
    if body is not None and start >= 0:
        message = body.group(2).strip().splitlines()
        first = first[:start].rstrip() + f" {body.group(1)}" + (f" ({message[0]})" if message else "")
    return first[:300]
