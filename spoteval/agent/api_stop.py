"""Stop this node through its provider's API: the agent's `on_done: api_stop` (Runpod).

    python -m spoteval.agent.api_stop runpod [--timeout S]

A Runpod pod whose process exits is restarted, so it must not end by exiting. The agent's config
`stop_rules.on_done: api_stop` makes the agent run this module (as its power-off command) once the
run's `stop` event is durable; the module asks the provider's API to stop this very node, and
returns as soon as the API has accepted the request (the stop itself then ends this process).
The providers it serves are those whose facts say `api_stop` (spoteval/providers.py). A Nebius VM
needs none: with `recovery_policy: FAIL` a shutdown from inside stops it (`on_done: poweroff`).

- runpod: the `stop` action of Runpod's REST API v2 (`POST /v2/pods/{id}/action`) with the pod's
  own `RUNPOD_POD_ID` and `RUNPOD_API_KEY` (standard library only; `RUNPOD_REST_URL` points
  elsewhere).

Exit codes: 0 the stop is requested; 1 the API refused or could not be reached; 2 bad input.
Standard library only (Python >= 3.10).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Final

from spoteval.apis.runpod import RunpodApi, RunpodError
from spoteval.cli import OneLineParser
from spoteval.providers import BY_KEY

PROG: Final = "spot-eval-api-stop"
#: providers whose node is stopped through the provider's API (spoteval/providers.py)
PROVIDERS: Final = tuple(p.key for p in BY_KEY.values() if p.api_stop)
RUNPOD_POD_ENV: Final = "RUNPOD_POD_ID"


class StopError(Exception):
    """The stop could not be requested; the message names the step."""


def command(provider: str, python: str | None = None) -> tuple[str, ...]:
    """The argv the agent runs for `on_done: api_stop` on `provider`."""
    return (python or sys.executable, "-m", "spoteval.agent.api_stop", provider)


def runpod_stop(env: Mapping[str, str], timeout: float) -> str:
    """Ask Runpod to stop this pod; returns the pod id."""
    pod_id = env.get(RUNPOD_POD_ENV, "")
    if not pod_id:
        raise StopError(f"{RUNPOD_POD_ENV} is not set (Runpod sets it inside a pod)")
    try:
        api = RunpodApi.from_env(env, timeout_s=timeout)
        api.stop_pod(pod_id)
    except RunpodError as exc:
        raise StopError(str(exc)) from None
    return pod_id


def stop(provider: str, *, timeout: float, env: Mapping[str, str]) -> str:
    """Request the stop; returns a line for the log."""
    pod_id = runpod_stop(env, timeout)
    return f"runpod pod {pod_id}: stop requested"


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description="stop this node through its provider's API")
    parser.add_argument("provider", choices=PROVIDERS)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per API call (default 20)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        print(f"{PROG}: --timeout must be > 0, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        line = stop(args.provider, timeout=args.timeout, env=os.environ)
    except StopError as exc:
        print(f"{PROG}: {args.provider}: {exc}", file=sys.stderr)
        return 1
    print(f"{PROG}: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
