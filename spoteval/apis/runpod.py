"""Runpod's REST API v2 with the standard library: pods, the GPU catalog, network volumes.

One client (`RunpodApi`) that the control plane (`spoteval.clouds.runpod`), the offers, the node
agent's API stop (`spoteval.agent.api_stop`) and the Pulumi dynamic provider
(`components/runpod_provider.py`) share; it runs on the pod too.

- Credentials: `RUNPOD_API_KEY` (sent as `Authorization: Bearer`). Address: `RUNPOD_REST_URL`
  (default `DEFAULT_REST_URL`, spoteval/providers/runpod.py). Tests point it at a fake.
- Errors: `RunpodError`, one line naming the call; 401/403 name the key's variable.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.providers import RUNPOD

#: REST API v2 (spoteval/providers/runpod.py)
DEFAULT_REST_URL: Final = RUNPOD.api_urls["rest"]
API_KEY_ENV: Final = "RUNPOD_API_KEY"
REST_URL_ENV: Final = "RUNPOD_REST_URL"
#: the clouds a pod runs in; network volumes exist in SECURE only
CLOUDS: Final = ("SECURE", "COMMUNITY")

_STATES: Final = {
    "PROVISIONING": "pending",
    "STARTING": "pending",
    "EXITED": "stopped",
    "ERROR": "stopped",
    "TERMINATED": "terminated",
}


class RunpodError(Exception):
    """The Runpod API refused or failed a call; the message names the operation."""


@dataclass(frozen=True)
class PodPort:
    ip: str
    private_port: int
    public_port: int
    type: str


@dataclass(frozen=True)
class Pod:
    id: str
    status_word: str
    cost_per_hr: float | None
    gpu_count: int | None
    cloud: str
    has_runtime: bool
    ports: tuple[PodPort, ...] = ()
    private_ip: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Pod:
        runtime = raw.get("runtime")
        ports: list[PodPort] = []
        if isinstance(runtime, Mapping):
            for port in runtime.get("ports") or []:
                if not isinstance(port, Mapping) or not port.get("ip"):
                    continue
                try:
                    ports.append(
                        PodPort(
                            ip=str(port["ip"]),
                            private_port=int(port.get("private") or 0),
                            public_port=int(port.get("public") or 0),
                            type=str(port.get("type") or ""),
                        )
                    )
                except (TypeError, ValueError):
                    continue
        gpu = raw.get("gpu")
        gpus = gpu.get("count") if isinstance(gpu, Mapping) else None
        networking = raw.get("globalNetworking")
        private = networking.get("ip") if isinstance(networking, Mapping) else None
        return cls(
            id=str(raw.get("id") or ""),
            status_word=str(raw.get("status") or "UNKNOWN"),
            cost_per_hr=number(raw.get("cost")),
            gpu_count=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else None,
            cloud=str(raw.get("cloud") or "SECURE"),
            has_runtime=isinstance(runtime, Mapping) and bool(runtime),
            ports=tuple(ports),
            private_ip=str(private) if private else None,
            raw=dict(raw),
        )

    @property
    def status(self) -> str:
        if self.status_word == "RUNNING":
            return "running" if self.has_runtime else "pending"
        return _STATES.get(self.status_word, "unknown")


@dataclass(frozen=True)
class GpuPrice:
    """List prices per GPU-hour of one GPU type, per cloud (None where the catalog gives none)."""

    gpu_type: str
    secure: float | None
    community: float | None

    def of(self, cloud: str) -> float | None:
        return self.secure if cloud == "SECURE" else self.community


def number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class RunpodApi:
    """Runpod's REST API v2 (pods, the GPU catalog, network volumes), with the standard library."""

    api_key: str
    rest_url: str = DEFAULT_REST_URL
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, timeout_s: float = 30.0) -> RunpodApi:
        env = os.environ if env is None else env
        key = env.get(API_KEY_ENV, "")
        if not key:
            raise RunpodError(f"{API_KEY_ENV} is not set (the Runpod API key)")
        rest = (env.get(REST_URL_ENV) or DEFAULT_REST_URL).rstrip("/")
        return cls(api_key=key, rest_url=rest, timeout_s=timeout_s)

    def rest(self, method: str, path: str, body: object | None, what: str) -> Any:
        """One call; the answer's JSON (None when empty); RunpodError names `what` and the problem."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.rest_url.rstrip('/')}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "spot-eval",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                text = reply.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()[:500].decode(errors="replace").strip()
            if exc.code in (401, 403):
                raise RunpodError(
                    f"{what}: HTTP {exc.code}: the API key is refused ({API_KEY_ENV})"
                ) from None
            try:
                doc = json.loads(raw)
                detail = str(doc.get("detail") or doc.get("title") or raw)
            except (ValueError, AttributeError):
                detail = raw
            raise RunpodError(f"{what}: HTTP {exc.code}: {detail}") from None
        except (OSError, ValueError) as exc:
            raise RunpodError(f"{what}: {exc}") from None
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise RunpodError(f"{what}: the answer is not JSON: {text[:200]!r}") from None

    def _found(self, method: str, path: str, what: str) -> Mapping[str, Any] | None:
        try:
            result = self.rest(method, path, None, what)
        except RunpodError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return result if isinstance(result, Mapping) else None

    # --- pods and prices ------------------------------------------------------------------------

    def gpu_price(self, gpu_type: str) -> GpuPrice | None:
        path = f"catalog/gpus/{urllib.parse.quote(gpu_type, safe='')}"
        entry = self._found("GET", path, f"runpod catalog GPU {gpu_type!r}")
        if entry is None:
            return None
        price = entry.get("price")
        price = price if isinstance(price, Mapping) else {}
        return GpuPrice(gpu_type, number(price.get("secure")), number(price.get("community")))

    def pod(self, pod_id: str) -> Pod | None:
        raw = self._found("GET", f"pods/{pod_id}", f"runpod pod {pod_id}")
        return Pod.parse(raw) if raw is not None else None

    def action(self, pod_id: str, action: str) -> Pod | None:
        """`start`, `stop` or `terminate`; the pod as it is now (None after terminate)."""
        result = self.rest("POST", f"pods/{pod_id}/action", {"action": action}, f"runpod {action} {pod_id}")
        return Pod.parse(result) if isinstance(result, Mapping) else None

    def stop_pod(self, pod_id: str) -> None:
        self.action(pod_id, "stop")

    def create_pod(self, pod_input: Mapping[str, Any]) -> Pod:
        what = f"runpod create pod {pod_input.get('name')!r}"
        result = self.rest("POST", "pods", dict(pod_input), what)
        if not isinstance(result, Mapping) or not result.get("id"):
            raise RunpodError(f"{what}: no pod in the answer")
        return Pod.parse(result)

    def terminate_pod(self, pod_id: str) -> None:
        self.rest("DELETE", f"pods/{pod_id}", None, f"runpod terminate {pod_id}")

    # --- network volumes ------------------------------------------------------------------------

    def create_network_volume(self, name: str, size_gb: int, data_center: str) -> Mapping[str, Any]:
        body = {"name": name, "size": size_gb, "dataCenter": data_center}
        result = self.rest("POST", "network-volumes", body, f"runpod create network volume {name!r}")
        if not isinstance(result, Mapping) or not result.get("id"):
            raise RunpodError(f"runpod create network volume {name!r}: no id in the answer")
        return result

    def network_volume(self, volume_id: str) -> Mapping[str, Any] | None:
        return self._found("GET", f"network-volumes/{volume_id}", f"runpod network volume {volume_id}")

    def resize_network_volume(self, volume_id: str, size_gb: int) -> Mapping[str, Any]:
        result = self.rest(
            "PATCH", f"network-volumes/{volume_id}", {"size": size_gb}, f"runpod resize {volume_id}"
        )
        return result if isinstance(result, Mapping) else {}

    def delete_network_volume(self, volume_id: str) -> None:
        self.rest("DELETE", f"network-volumes/{volume_id}", None, f"runpod delete network volume {volume_id}")
