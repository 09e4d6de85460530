"""AWS: the EventBridge events the stack's rules write to its CloudWatch Logs group (boto3).

Each log event's message is one EventBridge event as JSON (`id`, `detail-type`, `time`, `detail`).

- `EC2 Spot Instance Interruption Warning` (`detail.instance-id`, `detail.instance-action`: stop,
  terminate or hibernate) becomes a `preempted` event at the warning's time; EC2 takes the instance
  two minutes later. Its `launch_time` is the instance's last `pending` before it, when the log has
  one (a node taken while booting, before its agent wrote anything).
- `EC2 Instance State-change Notification` to `stopped` or `terminated` becomes a `stop` event,
  unless it follows an interruption warning of the instance within the notice (two minutes, plus a
  minute's slack): that is the same interruption, already recorded. Other states (pending, running,
  stopping, shutting-down) and rebalance recommendations are not recorded.

Credentials, endpoint and retries come from the standard environment as boto3 reads it; the region
is the stack's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from spoteval.events.base import Capture, EventsError, ProviderEvent, time_of
from spoteval.events.facts import EVENT_HISTORY
from spoteval.providers import AWS
from spoteval.record import format_time

_FACTS: Final = EVENT_HISTORY["aws"]
WARNING: Final = next(iter(_FACTS.interruptions))
STATE_CHANGE: Final = _FACTS.state_change
#: a state change this long after a warning of its instance is that interruption's end
FOLD_WINDOW: Final = timedelta(seconds=(AWS.notice_s or 120) + 60)


def _eventbridge(message: str) -> Mapping[str, Any] | None:
    try:
        obj = json.loads(message)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("detail"), dict) else None


def provider_events(messages: Iterable[str]) -> list[ProviderEvent]:
    """The interruptions and stops among EventBridge events (JSON messages), in time order."""
    parsed: list[tuple[datetime, Mapping[str, Any]]] = []
    for message in messages:
        obj = _eventbridge(message)
        if obj is None or obj.get("detail-type") not in (WARNING, STATE_CHANGE):
            continue
        parsed.append((time_of(obj.get("time"), f"EventBridge event {obj.get('id')!r} time"), obj))
    parsed.sort(key=lambda t: (t[0], str(t[1].get("id"))))
    out: list[ProviderEvent] = []
    pending: dict[str, datetime] = {}
    warned: dict[str, datetime] = {}
    for when, obj in parsed:
        detail = obj["detail"]
        instance, event_id = detail.get("instance-id"), obj.get("id")
        if not isinstance(instance, str) or not instance or not isinstance(event_id, str) or not event_id:
            continue
        if obj["detail-type"] == WARNING:
            details: dict[str, Any] = {"instance_action": detail.get("instance-action")}
            if instance in pending:
                details["launch_time"] = format_time(pending[instance])
            out.append(ProviderEvent(event_id, instance, when, "preempted", WARNING, details))
            warned[instance] = when
            continue
        state = detail.get("state")
        if state == "pending":
            pending[instance] = when
        if state not in _FACTS.stopped_states:
            continue
        pending.pop(instance, None)
        warning = warned.pop(instance, None)
        if warning is not None and when - warning <= FOLD_WINDOW:
            continue  # the interruption the warning announced
        out.append(ProviderEvent(event_id, instance, when, "stop", STATE_CHANGE, {"state": state}))
    return out


class CloudWatchReader:
    """Reads every event of the stack's Logs group (`logs:FilterLogEvents`, all pages)."""

    def __init__(self, client: Any, log_group: str) -> None:
        self.client = client
        self.log_group = log_group

    def messages(self) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        out: list[str] = []
        try:
            for page in self.client.get_paginator("filter_log_events").paginate(logGroupName=self.log_group):
                out.extend(str(e.get("message", "")) for e in page.get("events", []))
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code, message = err.get("Code", "error"), err.get("Message", exc)
            raise EventsError(f"CloudWatch Logs group {self.log_group}: {code}: {message}") from None
        except BotoCoreError as exc:
            raise EventsError(f"CloudWatch Logs group {self.log_group}: {exc}") from None
        return out

    def read(self) -> list[ProviderEvent]:
        return provider_events(self.messages())


def connect(capture: Capture, region: str) -> CloudWatchReader:
    import boto3

    return CloudWatchReader(boto3.client("logs", region_name=region), capture.fields["log_group"])
