"""AWS: IMDSv2 spot instance-action (stop work by its `time`) and rebalance recommendation (recorded,
work continues). Every `poll_s` both paths through the one IMDSv2 client (`spoteval.apis.imds`,
its session token included); 404 means nothing is scheduled."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Final

from spoteval.agent.notices.base import Notice, PollingWatcher, WatchContext, json_object
from spoteval.apis.http import Reply
from spoteval.apis.imds import PATHS, TOKEN_TTL_MAX_S, Imds
from spoteval.providers import AWS
from spoteval.record import RecordError, parse_time, utc_now

assert AWS.notice_s is not None
#: seconds from a notice to the reclaim when the notice carries no time
NOTICE_S: Final = float(AWS.notice_s)


class AwsWatcher(PollingWatcher):
    """IMDSv2: spot instance-action (stop work) and rebalance recommendation (record only)."""

    name = "aws"
    LABEL = "AWS metadata"

    def __init__(self, ctx: WatchContext) -> None:
        super().__init__(ctx)
        self._imds = Imds(ctx.base_url, ttl_s=TOKEN_TTL_MAX_S)
        self._seen: set[bytes] = set()

    def _get(self, path: str) -> Reply:
        return self._imds.get(path)

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
