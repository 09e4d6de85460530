"""AWS: IMDSv2 spot instance-action (stop work by its `time`) and rebalance recommendation (recorded,
work continues). A session token first (`PUT` with the TTL header), then every `poll_s` both paths
with the token; 404 means nothing is scheduled."""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from typing import Final

from spoteval.agent.notices.base import Notice, PollingWatcher, WatchContext, json_object
from spoteval.agent.notices.http import Reply, http
from spoteval.providers import AWS
from spoteval.record import RecordError, parse_time, utc_now

_METADATA = AWS.metadata
assert _METADATA is not None and _METADATA.token_header and _METADATA.token_ttl_header
assert _METADATA.token_ttl_max_s is not None and AWS.notice_s is not None
#: seconds from a notice to the reclaim when the notice carries no time
NOTICE_S: Final = float(AWS.notice_s)
TOKEN_HEADER: Final = _METADATA.token_header
TOKEN_TTL_HEADER: Final = _METADATA.token_ttl_header
TOKEN_TTL_S: Final = _METADATA.token_ttl_max_s
PATHS: Final = _METADATA.paths


class AwsWatcher(PollingWatcher):
    """IMDSv2: spot instance-action (stop work) and rebalance recommendation (record only)."""

    name = "aws"
    LABEL = "AWS metadata"

    def __init__(self, ctx: WatchContext) -> None:
        super().__init__(ctx)
        self._token: str | None = None
        self._token_expires = 0.0
        self._seen: set[bytes] = set()

    def _get_token(self) -> str:
        if self._token is None or time.monotonic() > self._token_expires:
            reply = http(
                self.ctx.base_url + PATHS["token"],
                method="PUT",
                headers={TOKEN_TTL_HEADER: str(TOKEN_TTL_S)},
            )
            if reply.status != 200 or not reply.body:
                raise OSError(f"IMDSv2 token request answered {reply.status}")
            try:
                self._token = reply.body.decode("ascii").strip()
            except UnicodeDecodeError:
                raise OSError("IMDSv2 token is not text") from None
            self._token_expires = time.monotonic() + TOKEN_TTL_S - 60
        return self._token

    def _get(self, path: str) -> Reply:
        reply = http(self.ctx.base_url + path, headers={TOKEN_HEADER: self._get_token()})
        if reply.status == 401:  # token expired or revoked: fetch a new one once
            self._token = None
            reply = http(self.ctx.base_url + path, headers={TOKEN_HEADER: self._get_token()})
        return reply

    def check(self) -> list[Notice]:
        """One poll of both endpoints; each distinct notice is returned once."""
        found: list[Notice] = []
        now = utc_now()
        action = self._get(PATHS["instance_action"])
        if action.status == 200 and action.body and action.body not in self._seen:
            self._seen.add(action.body)
            payload = json_object(action.body)
            deadline = now + timedelta(seconds=NOTICE_S)
            if isinstance(payload.get("time"), str):
                with contextlib.suppress(RecordError):
                    deadline = parse_time(payload["time"])
            found.append(
                Notice("spot_interruption", now, deadline, True, self.name, {"instance_action": payload})
            )
        elif action.status not in (200, 404):
            raise OSError(f"spot/instance-action answered {action.status}")
        rebalance = self._get(PATHS["rebalance"])
        if rebalance.status == 200 and rebalance.body and rebalance.body not in self._seen:
            self._seen.add(rebalance.body)
            payload = json_object(rebalance.body)
            found.append(
                Notice(
                    "rebalance_recommendation",
                    now,
                    now + timedelta(seconds=NOTICE_S),
                    False,
                    self.name,
                    {"rebalance": payload},
                )
            )
        elif rebalance.status not in (200, 404):
            raise OSError(f"events/recommendations/rebalance answered {rebalance.status}")
        return found
