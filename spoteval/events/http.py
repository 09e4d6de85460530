"""A JSON call over HTTP with a bearer token, for the readers that speak a provider's REST API
(`spoteval.apis.http`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spoteval.apis.http import json_object
from spoteval.events.base import EventsError


def call_json(url: str, token: str, body: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """GET (or POST `body`) and parse a JSON object; errors name the URL without its query."""
    return json_object(url, EventsError, token=token, body=body, timeout=60)
