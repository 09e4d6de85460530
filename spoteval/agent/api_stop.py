"""Stop this node through its provider's API: the agent's `on_done: api_stop` (Nebius, Runpod).

    python -m spoteval.agent.api_stop nebius|runpod [--metadata-url URL] [--timeout S]

Some nodes must not be powered off from inside: a Nebius VM shut down from inside the OS reboots and
keeps billing, and a Runpod pod whose process exits is restarted. The agent's config
`stop_rules.on_done: api_stop` makes the agent run this module (as its power-off command) once the
run's `stop` event is durable; the module asks the provider's API to stop this very node, and
returns as soon as the API has accepted the request (the stop itself then ends this process).

- nebius: the instance id from the instance metadata service (`GET {metadata}/v1/instance-data`
  with `Metadata: true`), an access token of the VM's service account from the same service
  (`GET {metadata}/v1/iam/sa/token`, JSON `access_token`; `NEBIUS_IAM_TOKEN` overrides it), then
  `compute.v1.InstanceService/Stop`. The Nebius API speaks gRPC only, so this one needs the
  `nebius` SDK on the node (the stack's startup script installs it next to obstore); without it
  the module says so and exits 1. `NEBIUS_API_ADDRESS` (host:port, tests: a plaintext fake) points
  the SDK elsewhere.
- runpod: `podStop` through Runpod's GraphQL API with the pod's own `RUNPOD_POD_ID` and
  `RUNPOD_API_KEY` (standard library only; `RUNPOD_API_BASE_URL` points elsewhere).

Exit codes: 0 the stop is requested; 1 the API refused or could not be reached; 2 bad input.
Standard library only (Python >= 3.10), apart from the `nebius` SDK for Nebius.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Final

from spoteval.cli import OneLineParser
from spoteval.providers import BY_KEY, NEBIUS

PROG: Final = "spot-eval-api-stop"
#: providers whose node is stopped through the provider's API (spoteval/providers.py)
PROVIDERS: Final = tuple(p.key for p in BY_KEY.values() if p.api_stop)
_NEBIUS_METADATA = NEBIUS.metadata
assert _NEBIUS_METADATA is not None
NEBIUS_METADATA_URL: Final = _NEBIUS_METADATA.base_url
NEBIUS_METADATA_HEADERS: Final = _NEBIUS_METADATA.headers
NEBIUS_INSTANCE_PATH: Final = _NEBIUS_METADATA.paths["instance_data"]
NEBIUS_TOKEN_PATH: Final = _NEBIUS_METADATA.paths["token"]
NEBIUS_TOKEN_ENV: Final = "NEBIUS_IAM_TOKEN"
NEBIUS_ADDRESS_ENV: Final = "NEBIUS_API_ADDRESS"
RUNPOD_POD_ENV: Final = "RUNPOD_POD_ID"

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StopError(Exception):
    """The stop could not be requested; the message names the step."""


def command(provider: str, python: str | None = None) -> tuple[str, ...]:
    """The argv the agent runs for `on_done: api_stop` on `provider`."""
    return (python or sys.executable, "-m", "spoteval.agent.api_stop", provider)


def _metadata_json(base: str, path: str, timeout: float) -> Mapping[str, Any]:
    url = base.rstrip("/") + path
    request = urllib.request.Request(url, headers=dict(NEBIUS_METADATA_HEADERS))
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            data = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise StopError(f"metadata {path}: HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise StopError(f"metadata {path}: {exc}") from None
    if not isinstance(data, dict):
        raise StopError(f"metadata {path}: not a JSON object")
    return data


def nebius_identity(metadata_url: str, env: Mapping[str, str], timeout: float) -> tuple[str, str]:
    """(instance id, access token) from the VM's metadata service (the token may come from env)."""
    instance = _metadata_json(metadata_url, NEBIUS_INSTANCE_PATH, timeout)
    instance_id = instance.get("id")
    if not isinstance(instance_id, str) or not instance_id:
        raise StopError(f"metadata {NEBIUS_INSTANCE_PATH}: no instance id")
    token = env.get(NEBIUS_TOKEN_ENV, "")
    if not token:
        answer = _metadata_json(metadata_url, NEBIUS_TOKEN_PATH, timeout)
        token = str(answer.get("access_token") or "")
        if not token:
            raise StopError(
                f"metadata {NEBIUS_TOKEN_PATH}: no access_token (is a service account attached to the VM?)"
            )
    return instance_id, token


def nebius_stop(instance_id: str, token: str, env: Mapping[str, str], timeout: float) -> str:
    """Ask Nebius to stop the instance; returns the operation id."""
    try:
        from nebius.api.nebius.compute.v1 import InstanceServiceClient, StopInstanceRequest
        from nebius.base.error import SDKError
        from nebius.sdk import SDK
    except ImportError:
        raise StopError(
            "the nebius SDK is not installed on this node (the Nebius API speaks gRPC only): "
            "pip install nebius into the agent's environment"
        ) from None
    kwargs: dict[str, Any] = {}
    address = env.get(NEBIUS_ADDRESS_ENV, "")
    if address:
        from nebius.base.options import INSECURE
        from nebius.base.resolver import Prefix

        kwargs["resolver"] = Prefix("nebius.", address)
        if address.startswith(("127.", "localhost:")):
            kwargs["address_options"] = {address: [(INSECURE, True)]}
    sdk = SDK(credentials=token, user_agent_prefix="spot-eval-agent/1", **kwargs)
    try:
        client = InstanceServiceClient(sdk)
        operation = client.stop(StopInstanceRequest(id=instance_id), timeout=timeout).wait()
        if operation.done() and not operation.successful():
            raise StopError(f"nebius Stop {instance_id}: the operation failed: {operation.status()}")
        return str(operation.id)
    except SDKError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StopError(f"nebius Stop {instance_id}: {first}") from None
    finally:
        sdk.sync_close()


def runpod_stop(env: Mapping[str, str], timeout: float) -> str:
    """Ask Runpod to stop this pod; returns the pod id."""
    from spoteval.clouds.runpod import RunpodApi, RunpodError

    pod_id = env.get(RUNPOD_POD_ENV, "")
    if not pod_id:
        raise StopError(f"{RUNPOD_POD_ENV} is not set (Runpod sets it inside a pod)")
    try:
        api = RunpodApi.from_env(env, timeout_s=timeout)
        api.stop_pod(pod_id)
    except RunpodError as exc:
        raise StopError(str(exc)) from None
    return pod_id


def stop(provider: str, *, metadata_url: str | None, timeout: float, env: Mapping[str, str]) -> str:
    """Request the stop; returns a line for the log."""
    if provider == "nebius":
        instance_id, token = nebius_identity(metadata_url or NEBIUS_METADATA_URL, env, timeout)
        operation = nebius_stop(instance_id, token, env, timeout)
        return f"nebius instance {instance_id}: stop requested (operation {operation})"
    pod_id = runpod_stop(env, timeout)
    return f"runpod pod {pod_id}: stop requested"


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description="stop this node through its provider's API")
    parser.add_argument("provider", choices=PROVIDERS)
    parser.add_argument("--metadata-url", help=f"instance metadata service (nebius; {NEBIUS_METADATA_URL})")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per API call (default 20)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        print(f"{PROG}: --timeout must be > 0, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        line = stop(args.provider, metadata_url=args.metadata_url, timeout=args.timeout, env=os.environ)
    except StopError as exc:
        print(f"{PROG}: {args.provider}: {exc}", file=sys.stderr)
        return 1
    print(f"{PROG}: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
