"""Runpod control plane: on-demand pods through Runpod's REST API v2 (standard library only).

Runpod offers no interruptible pods through any API it documents today (spoteval/providers.py,
`RUNPOD`, checked 2026-12-01): REST v1 (`interruptible` on `PodCreateInput`) was retired on
2026-11-15, REST v2's `CreatePodRequest` has no interruptible or bid field, and the GraphQL
`podRentInterruptable` / `podBidResume` were removed from the docs and announced for removal (the
GraphQL API itself retires in early 2027). So this module speaks REST v2 only, one path for pods,
prices and network volumes: a small client (`RunpodApi`) that the control plane, the node agent's
API stop (`spoteval.agent.api_stop`) and the Pulumi dynamic provider
(`components/runpod_provider.py`) share. It needs nothing beyond the standard library, so it runs on
the pod too.

- Credentials: `RUNPOD_API_KEY` (sent as `Authorization: Bearer`). Address: `RUNPOD_REST_URL`
  (default `DEFAULT_REST_URL`, `https://api.runpod.io/v2`). Tests point it at a fake.
- A node id is the pod id. The stack's `instance_type` output is the GPU type id (`NVIDIA L4`).
- State: `GET /v2/pods/{id}`: RUNNING with a runtime is running; PROVISIONING, STARTING and RUNNING
  without a runtime are pending; EXITED and ERROR are stopped (both take `start`); TERMINATED (or
  404) is gone.
- Price: `GET /v2/catalog/gpus/{id}`: the list price per GPU-hour of the pod's cloud (`price.secure`
  or `price.community`; the catalog prices per cloud, not per data center) times the pod's GPUs
  (`price_source` `api`); when the catalog has no such GPU type, the configured price.
- Stop / start: `POST /v2/pods/{id}/action` with `stop` / `start`, then polling. A start reads the
  price first and is refused above the stack's `max_price_per_gpu` output (the grant's cap per
  GPU). A started pod may come back with fewer GPUs than it had (its machine's GPUs went to others
  while it was stopped): `start()` then fails naming it.
- Runpod has no API that preempts a pod on request: `simulate_preemption()` stops it.
- Address: the pod's public IP (`runtime.ports[].ip`); private address kinds: the global
  networking IP. The model server's public port differs from its private one, see `server_url()`.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from spoteval.clouds.base import (
    PRIVATE_ADDRESS_KINDS,
    CapacityError,
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    StackOutputs,
    check_option_keys,
    configured_price,
    wait_for,
)
from spoteval.price import Price
from spoteval.providers import RUNPOD

#: REST API v2 (spoteval/providers.py)
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
#: Words of a start or create refused for lack of GPUs (worth retrying later)
#: [unconfirmed: the v2 API documents no capacity error code; checked 2026-12-01]
CAPACITY_WORDS: Final = (
    "no longer any instances available",
    "not enough free gpus",
    "no gpus available",
    "no instances available",
    "capacity",
)


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
            cost_per_hr=_number(raw.get("cost")),
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


def _number(value: object) -> float | None:
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
        return GpuPrice(gpu_type, _number(price.get("secure")), _number(price.get("community")))

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


def capped_price(per_gpu: float, max_per_gpu: float | None) -> float:
    """The price per GPU-hour a start would pay, refused above the grant's cap."""
    if max_per_gpu is not None and per_gpu > max_per_gpu + 1e-9:
        raise RunpodError(
            f"the price {per_gpu:g} per GPU-hour is above the most the grant allows "
            f"({max_per_gpu:g} per GPU-hour)"
        )
    return round(per_gpu, 4)


class RunpodPlane:
    provider = "runpod"
    restarts_itself = RUNPOD.restarts_itself
    can_stay_stopped = RUNPOD.can_stay_stopped

    def __init__(self, outputs: StackOutputs, node: str, config: PlaneOptions, api: RunpodApi) -> None:
        check_option_keys(config.own("runpod"), (), "runpod")  # the plane takes no options of its own
        self.outputs = outputs
        self.node = node
        self.config = config
        self.api = api
        self.gpu_type = outputs.instance_type
        self.max_price = _number(outputs.extra.get("max_price_per_gpu"))
        count = outputs.extra.get("gpu_count")
        self.gpu_count: int | None = count if isinstance(count, int) and not isinstance(count, bool) else None

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> RunpodPlane:
        try:
            api = RunpodApi.from_env()
        except RunpodError as exc:
            raise ControlPlaneError(f"runpod: {exc}") from None
        return cls(outputs, node, config, api)

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except RunpodError as exc:
            raise ControlPlaneError(str(exc) if str(exc).startswith("runpod") else f"{what}: {exc}") from None

    def _pod(self) -> Pod:
        pod: Pod | None = self._call(f"runpod pod {self.node}", self.api.pod, self.node)
        if pod is None:
            raise ControlPlaneError(f"runpod pod {self.node}: no such pod")
        return pod

    def _gpus(self, pod: Pod) -> int:
        return self.gpu_count if self.gpu_count is not None else (pod.gpu_count or 1)

    def state(self) -> NodeState:
        pod = self._pod()
        return NodeState(
            pod.status,
            pod.status_word,
            {"gpu_count": pod.gpu_count, "cost_per_hr": pod.cost_per_hr, "runtime": pod.has_runtime},
        )

    def address(self) -> str | None:
        pod = self._pod()
        if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
            return pod.private_ip if pod.has_runtime else None
        return pod.ports[0].ip if pod.ports else None

    def server_url(self) -> str | None:
        """http://IP:PORT where the model server's private port is published, if it is."""
        for port in self._pod().ports:
            if port.private_port == self.outputs.server_port and port.public_port:
                return f"http://{port.ip}:{port.public_port}"
        return None

    def _price(self, pod: Pod) -> Price | None:
        gpus = self._gpus(pod)
        prices: GpuPrice | None = self._call(
            f"runpod price {self.gpu_type}", self.api.gpu_price, self.gpu_type
        )
        per_gpu = None if prices is None else prices.of(pod.cloud)
        if per_gpu is None:
            return None
        details = {"gpu_type": self.gpu_type, "gpu_count": gpus, "per_gpu": per_gpu, "cloud": pod.cloud}
        return Price(round(per_gpu * gpus, 6), "USD", "api", details)

    def price_now(self) -> Price:
        pod = self._pod()
        price = self._price(pod)
        if price is None:
            return configured_price(
                self.config, reason=f"the API has no {pod.cloud} price for {self.gpu_type}"
            )
        return Price(
            price.per_hour,
            price.currency,
            price.source,
            {**price.details, "pod_cost_per_hr": pod.cost_per_hr},
        )

    def stop(self, timeout_s: float) -> None:
        what = f"runpod stop {self.node}"
        if self.state().status in ("stopped", "terminated"):
            return
        self._call(what, self.api.stop_pod, self.node)
        wait_for(self.state, {"stopped"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)

    def start(self, timeout_s: float) -> None:
        what = f"runpod start {self.node}"
        pod = self._pod()
        if pod.status == "running":
            return
        if pod.status == "terminated":
            raise ControlPlaneError(f"{what}: the pod is terminated")
        gpus = self._gpus(pod)
        if pod.status == "stopped":
            price = self._price(pod)  # the price in force, read before every start
            if price is None and self.max_price is not None:
                raise ControlPlaneError(f"{what}: the API gives no {pod.cloud} price for {self.gpu_type}")
            if price is not None:
                try:
                    capped_price(float(price.details["per_gpu"]), self.max_price)
                except RunpodError as exc:
                    raise ControlPlaneError(f"{what}: {exc}") from None
            try:
                self._call(what, self.api.action, self.node, "start")
            except ControlPlaneError as exc:
                if any(w in str(exc).lower() for w in CAPACITY_WORDS):
                    raise CapacityError(str(exc)) from None
                raise
        state = wait_for(self.state, {"running"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)
        got = state.details.get("gpu_count")
        if isinstance(got, int) and got < gpus:
            raise CapacityError(
                f"{what}: the pod came back with {got} GPU(s) instead of {gpus} (its machine's GPUs are "
                "taken); stop it and start it again later, or create a new pod"
            )

    def simulate_preemption(self, timeout_s: float) -> str:
        self.stop(timeout_s)
        return "stop"


def pod_input(
    *,
    name: str,
    image: str,
    gpu_type: str,
    gpu_count: int,
    cloud_type: str,
    container_disk_gb: int,
    docker_args: str,
    ports: Sequence[str],
    env: Mapping[str, str],
    network_volume_id: str | None,
    data_center: str | None,
    volume_mount_path: str,
) -> dict[str, Any]:
    """The `CreatePodRequest` of an on-demand GPU pod (REST v2)."""
    value: dict[str, Any] = {
        "name": name,
        "image": image,
        "gpu": {"id": gpu_type, "count": gpu_count},
        "cloud": cloud_type,
        "disk": container_disk_gb,
        "args": docker_args,
        "ports": list(ports),
        "env": dict(sorted(env.items())),
    }
    if network_volume_id:
        value["mounts"] = {"network": [{"volumeId": network_volume_id, "path": volume_mount_path}]}
    if data_center:
        value["dataCenterIds"] = [data_center]
    return value
