"""The AWS instance metadata service, IMDSv2: a session token first (`PUT` with the TTL header), then
every read with the token; a read answered 401 (the token expired or was revoked) takes a new token
once. The instance role's credentials come from `iam/security-credentials/{role}`, or from the
standard AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN variables when they are set.
Paths and headers: spoteval/providers/aws.py (`AWS.metadata`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from spoteval.apis.http import Reply, request
from spoteval.providers import AWS

assert AWS.metadata is not None
_FACTS: Final = AWS.metadata
_header, _ttl_header, _ttl_max = _FACTS.token_header, _FACTS.token_ttl_header, _FACTS.token_ttl_max_s
assert _header and _ttl_header and _ttl_max is not None
DEFAULT_URL: Final = _FACTS.base_url
TOKEN_HEADER: Final[str] = _header
TOKEN_TTL_HEADER: Final[str] = _ttl_header
#: the longest token lifetime IMDSv2 grants
TOKEN_TTL_MAX_S: Final[int] = _ttl_max
PATHS: Final = _FACTS.paths


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


class Imds:
    """IMDSv2 at `base_url`, with a token of `ttl_s` seconds renewed a minute before it ends."""

    def __init__(self, base_url: str | None = None, *, ttl_s: int = TOKEN_TTL_MAX_S) -> None:
        self.base_url = (base_url or DEFAULT_URL).rstrip("/")
        self.ttl_s = ttl_s
        self._token: str | None = None
        self._expires = 0.0

    def token(self) -> str:
        if self._token is None or time.monotonic() > self._expires:
            reply = request(
                self.base_url + PATHS["token"], method="PUT", headers={TOKEN_TTL_HEADER: str(self.ttl_s)}
            )
            if reply.status != 200 or not reply.body:
                raise OSError(f"IMDSv2 token request answered {reply.status}")
            try:
                self._token = reply.body.decode("ascii").strip()
            except UnicodeDecodeError:
                raise OSError("IMDSv2 token is not text") from None
            self._expires = time.monotonic() + self.ttl_s - 60
        return self._token

    def get(self, path: str, timeout: float = 2.0) -> Reply:
        """GET `path` with the token; a 401 takes a new token once."""
        reply = request(self.base_url + path, headers={TOKEN_HEADER: self.token()}, timeout=timeout)
        if reply.status == 401:
            self._token = None
            reply = request(self.base_url + path, headers={TOKEN_HEADER: self.token()}, timeout=timeout)
        return reply

    def role_credentials(self) -> Credentials:
        """The instance role's temporary credentials; OSError when the node has no role."""
        roles_path = PATHS["credentials"]
        roles = self.get(roles_path)
        if roles.status != 200 or not roles.body.strip():
            raise OSError(f"the node has no instance role (iam/security-credentials answered {roles.status})")
        role = roles.body.decode().split()[0]
        reply = self.get(roles_path + role)
        if reply.status != 200:
            raise OSError(f"iam/security-credentials/{role} answered {reply.status}")
        doc = json.loads(reply.body)
        try:
            return Credentials(str(doc["AccessKeyId"]), str(doc["SecretAccessKey"]), doc.get("Token"))
        except KeyError as exc:
            raise OSError(f"instance role credentials lack {exc}") from None


#: lifetime asked for the token of one credentials read
CREDENTIALS_TOKEN_TTL_S: Final = 300


def credentials(metadata_url: str | None, environ: Mapping[str, str] | None = None) -> Credentials:
    """The standard variables, else the instance role's credentials from IMDSv2; OSError if neither."""
    env = os.environ if environ is None else environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
        )
    return Imds(metadata_url, ttl_s=CREDENTIALS_TOKEN_TTL_S).role_credentials()
