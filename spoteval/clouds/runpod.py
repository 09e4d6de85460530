"""Runpod control plane: interruptible pods through Runpod's GraphQL API (standard library only).

The official `runpod` SDK (1.12) has no call for interruptible pods (`podRentInterruptable`,
`podBidResume`) and builds its queries by pasting values into the query text, so this module speaks
GraphQL itself, with variables: a small client (`RunpodApi`) that the control plane, the node
agent's API stop (`spoteval.agent.api_stop`) and the Pulumi dynamic provider
(`components/runpod_provider.py`) share. It needs nothing beyond the standard library, so it runs on
the pod too.

- Credentials: `RUNPOD_API_KEY` (sent as `Authorization: Bearer`). Address: `RUNPOD_API_BASE_URL`
  (as the official SDK reads it; GraphQL at `{base}/graphql`, default `DEFAULT_API_BASE`) and
  `RUNPOD_REST_URL` (network volumes, default `DEFAULT_REST_URL`). Tests point both at a fake.
- A node id is the pod id. The stack's `instance_type` output is the GPU type id (`NVIDIA L4`).
- State: `pod { desiredStatus runtime }`: RUNNING with a runtime is running, RUNNING without one is
  still starting (pending), EXITED is stopped (how an interrupted pod is left), TERMINATED is gone.
- Price: `gpuTypes { lowestPrice(input: {gpuCount}) { minimumBidPrice uninterruptablePrice } }`:
  the minimum bid per GPU now (spot) or the on-demand price, times the pod's GPUs (`price_source`
  `api`); when the API has no price for the type, the configured price.
- Stop: `podStop`; start: `podBidResume` at the minimum bid now, never above the stack's
  `max_bid_per_gpu` output (the grant's price cap per GPU): a start that would need a higher bid is
  refused. A resumed pod may come back with fewer GPUs than it had (Runpod gives the machine's GPUs
  to others while a pod is stopped): `start()` then fails naming it.
- Runpod has no API that preempts a pod on request: `simulate_preemption()` stops it.
- Address: the pod's public IP (`runtime.ports`); the model server's public port differs from its
  private one, see `server_url()`.
"""

from __future__ import annotations

import json
import os
import urllib.error
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

#: GraphQL base and REST API (spoteval/providers.py)
DEFAULT_API_BASE: Final = RUNPOD.api_urls["graphql"]
DEFAULT_REST_URL: Final = RUNPOD.api_urls["rest"]
API_KEY_ENV: Final = "RUNPOD_API_KEY"
API_BASE_ENV: Final = "RUNPOD_API_BASE_URL"
REST_URL_ENV: Final = "RUNPOD_REST_URL"

GPU_PRICE: Final = """
query SpotEvalGpuPrice($id: String!, $gpuCount: Int!) {
  gpuTypes(input: {id: $id}) {
    id
    displayName
    communitySpotPrice
    secureSpotPrice
    lowestPrice(input: {gpuCount: $gpuCount}) { minimumBidPrice uninterruptablePrice }
  }
}
"""
POD: Final = """
query SpotEvalPod($podId: String!) {
  pod(input: {podId: $podId}) {
    id
    name
    desiredStatus
    costPerHr
    gpuCount
    machineId
    lastStatusChange
    runtime { ports { ip isIpPublic privatePort publicPort type } }
  }
}
"""
POD_STOP: Final = """
mutation SpotEvalPodStop($podId: String!) {
  podStop(input: {podId: $podId}) { id desiredStatus }
}
"""
POD_BID_RESUME: Final = """
mutation SpotEvalPodBidResume($podId: String!, $bidPerGpu: Float!, $gpuCount: Int!) {
  podBidResume(input: {podId: $podId, bidPerGpu: $bidPerGpu, gpuCount: $gpuCount}) {
    id desiredStatus costPerHr
  }
}
"""
POD_RENT_INTERRUPTABLE: Final = """
mutation SpotEvalPodRent($input: PodRentInterruptableInput!) {
  podRentInterruptable(input: $input) { id desiredStatus costPerHr machineId }
}
"""
POD_TERMINATE: Final = """
mutation SpotEvalPodTerminate($podId: String!) {
  podTerminate(input: {podId: $podId})
}
"""

_STATES: Final = {"EXITED": "stopped", "TERMINATED": "terminated", "CREATED": "pending"}
#: Words of a podBidResume refused for lack of GPUs on the pod's machine (worth retrying later)
#: [unconfirmed: the GraphQL API documents no error codes; checked 2026-12-01]
CAPACITY_WORDS: Final = ("no longer any instances available", "not enough free gpus", "no gpus available")


class RunpodError(Exception):
    """The Runpod API refused or failed a call; the message names the operation."""


@dataclass(frozen=True)
class PodPort:
    ip: str
    public: bool
    private_port: int
    public_port: int
    type: str


@dataclass(frozen=True)
class Pod:
    id: str
    desired_status: str
    cost_per_hr: float | None
    gpu_count: int | None
    has_runtime: bool
    ports: tuple[PodPort, ...] = ()
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
                            public=bool(port.get("isIpPublic")),
                            private_port=int(port.get("privatePort") or 0),
                            public_port=int(port.get("publicPort") or 0),
                            type=str(port.get("type") or ""),
                        )
                    )
                except (TypeError, ValueError):
                    continue
        cost = raw.get("costPerHr")
        gpus = raw.get("gpuCount")
        return cls(
            id=str(raw.get("id") or ""),
            desired_status=str(raw.get("desiredStatus") or "UNKNOWN"),
            cost_per_hr=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
            gpu_count=int(gpus) if isinstance(gpus, int) and not isinstance(gpus, bool) else None,
            has_runtime=isinstance(runtime, Mapping),
            ports=tuple(ports),
            raw=dict(raw),
        )

    @property
    def status(self) -> str:
        if self.desired_status == "RUNNING":
            return "running" if self.has_runtime else "pending"
        return _STATES.get(self.desired_status, "unknown")


@dataclass(frozen=True)
class GpuPrice:
    """Prices per GPU-hour of one GPU type (None where the API gives none)."""

    gpu_type: str
    minimum_bid: float | None
    on_demand: float | None
    community_spot: float | None
    secure_spot: float | None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class RunpodApi:
    """Runpod's GraphQL (pods, prices) and REST (network volumes) APIs, with the standard library."""

    api_key: str
    api_base: str = DEFAULT_API_BASE
    rest_url: str = DEFAULT_REST_URL
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, timeout_s: float = 30.0) -> RunpodApi:
        env = os.environ if env is None else env
        key = env.get(API_KEY_ENV, "")
        if not key:
            raise RunpodError(f"{API_KEY_ENV} is not set (the Runpod API key)")
        return cls(
            api_key=key,
            api_base=(env.get(API_BASE_ENV) or DEFAULT_API_BASE).rstrip("/"),
            rest_url=(env.get(REST_URL_ENV) or DEFAULT_REST_URL).rstrip("/"),
            timeout_s=timeout_s,
        )

    @property
    def graphql_url(self) -> str:
        return f"{self.api_base.rstrip('/')}/graphql"

    def _send(self, method: str, url: str, body: object | None, what: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            url,
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
            detail = exc.read()[:300].decode(errors="replace").strip()
            if exc.code in (401, 403):
                raise RunpodError(
                    f"{what}: HTTP {exc.code}: the API key is refused ({API_KEY_ENV})"
                ) from None
            raise RunpodError(f"{what}: HTTP {exc.code}: {detail}") from None
        except (OSError, ValueError) as exc:
            raise RunpodError(f"{what}: {exc}") from None
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise RunpodError(f"{what}: the answer is not JSON: {text[:200]!r}") from None

    def graphql(self, document: str, variables: Mapping[str, Any], what: str) -> Mapping[str, Any]:
        """Run one query or mutation; returns its `data`, or raises RunpodError with the first error."""
        doc = self._send("POST", self.graphql_url, {"query": document, "variables": dict(variables)}, what)
        if not isinstance(doc, Mapping):
            raise RunpodError(f"{what}: the answer is not a JSON object")
        errors = doc.get("errors")
        if errors:
            first = errors[0] if isinstance(errors, list) and errors else errors
            message = first.get("message") if isinstance(first, Mapping) else first
            raise RunpodError(f"{what}: {message}")
        data = doc.get("data")
        if not isinstance(data, Mapping):
            raise RunpodError(f"{what}: the answer has no data")
        return data

    def rest(self, method: str, path: str, body: object | None, what: str) -> Any:
        return self._send(method, f"{self.rest_url.rstrip('/')}/{path.lstrip('/')}", body, what)

    # --- pods and prices ------------------------------------------------------------------------

    def gpu_price(self, gpu_type: str, gpu_count: int = 1) -> GpuPrice | None:
        what = f"runpod gpuTypes {gpu_type!r}"
        data = self.graphql(GPU_PRICE, {"id": gpu_type, "gpuCount": gpu_count}, what)
        types = data.get("gpuTypes") or []
        if not isinstance(types, list):
            raise RunpodError(f"{what}: gpuTypes is not a list")
        for entry in types:
            if isinstance(entry, Mapping) and entry.get("id") == gpu_type:
                lowest = entry.get("lowestPrice") or {}
                if not isinstance(lowest, Mapping):
                    lowest = {}
                return GpuPrice(
                    gpu_type=gpu_type,
                    minimum_bid=_number(lowest.get("minimumBidPrice")),
                    on_demand=_number(lowest.get("uninterruptablePrice")),
                    community_spot=_number(entry.get("communitySpotPrice")),
                    secure_spot=_number(entry.get("secureSpotPrice")),
                )
        return None

    def pod(self, pod_id: str) -> Pod | None:
        data = self.graphql(POD, {"podId": pod_id}, f"runpod pod {pod_id}")
        raw = data.get("pod")
        return Pod.parse(raw) if isinstance(raw, Mapping) else None

    def stop_pod(self, pod_id: str) -> str:
        data = self.graphql(POD_STOP, {"podId": pod_id}, f"runpod podStop {pod_id}")
        result = data.get("podStop")
        return str(result.get("desiredStatus") or "") if isinstance(result, Mapping) else ""

    def bid_resume(self, pod_id: str, bid_per_gpu: float, gpu_count: int) -> Pod:
        variables = {"podId": pod_id, "bidPerGpu": bid_per_gpu, "gpuCount": gpu_count}
        data = self.graphql(POD_BID_RESUME, variables, f"runpod podBidResume {pod_id}")
        result = data.get("podBidResume")
        if not isinstance(result, Mapping):
            raise RunpodError(f"runpod podBidResume {pod_id}: no pod in the answer")
        return Pod.parse(result)

    def rent_interruptable(self, pod_input: Mapping[str, Any]) -> Pod:
        what = f"runpod podRentInterruptable {pod_input.get('name')!r}"
        data = self.graphql(POD_RENT_INTERRUPTABLE, {"input": dict(pod_input)}, what)
        result = data.get("podRentInterruptable")
        if not isinstance(result, Mapping) or not result.get("id"):
            raise RunpodError(f"{what}: no pod in the answer (no capacity at this bid?)")
        return Pod.parse(result)

    def terminate_pod(self, pod_id: str) -> None:
        self.graphql(POD_TERMINATE, {"podId": pod_id}, f"runpod podTerminate {pod_id}")

    # --- network volumes (REST) -----------------------------------------------------------------

    def create_network_volume(self, name: str, size_gb: int, data_center: str) -> Mapping[str, Any]:
        body = {"name": name, "size": size_gb, "dataCenterId": data_center}
        result = self.rest("POST", "networkvolumes", body, f"runpod create network volume {name!r}")
        if not isinstance(result, Mapping) or not result.get("id"):
            raise RunpodError(f"runpod create network volume {name!r}: no id in the answer")
        return result

    def network_volume(self, volume_id: str) -> Mapping[str, Any] | None:
        try:
            result = self.rest(
                "GET", f"networkvolumes/{volume_id}", None, f"runpod network volume {volume_id}"
            )
        except RunpodError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return result if isinstance(result, Mapping) else None

    def resize_network_volume(self, volume_id: str, size_gb: int) -> Mapping[str, Any]:
        result = self.rest(
            "PATCH", f"networkvolumes/{volume_id}", {"size": size_gb}, f"runpod resize {volume_id}"
        )
        return result if isinstance(result, Mapping) else {}

    def delete_network_volume(self, volume_id: str) -> None:
        self.rest("DELETE", f"networkvolumes/{volume_id}", None, f"runpod delete network volume {volume_id}")


def capped_bid(minimum_bid: float, max_bid: float | None) -> float:
    """The bid for a start: the minimum that gets capacity now, refused above the grant's cap."""
    if max_bid is not None and minimum_bid > max_bid + 1e-9:
        raise RunpodError(
            f"the minimum bid {minimum_bid:g} per GPU-hour is above the most the grant allows "
            f"({max_bid:g} per GPU-hour)"
        )
    return round(minimum_bid, 4)


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
        self.max_bid = _number(outputs.extra.get("max_bid_per_gpu"))
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

    def _gpus(self, pod: Pod | None = None) -> int:
        if self.gpu_count is not None:
            return self.gpu_count
        pod = pod or self._pod()
        return pod.gpu_count or 1

    def state(self) -> NodeState:
        pod = self._pod()
        return NodeState(
            pod.status,
            pod.desired_status,
            {"gpu_count": pod.gpu_count, "cost_per_hr": pod.cost_per_hr, "runtime": pod.has_runtime},
        )

    def address(self) -> str | None:
        pod = self._pod()
        if not pod.ports:
            return None
        if self.outputs.address_kind in PRIVATE_ADDRESS_KINDS:
            private = [p for p in pod.ports if not p.public]
            return private[0].ip if private else None
        public = [p for p in pod.ports if p.public]
        return (public or list(pod.ports))[0].ip

    def server_url(self) -> str | None:
        """http://IP:PORT where the model server's private port is published, if it is."""
        pod = self._pod()
        for port in pod.ports:
            if port.private_port == self.outputs.server_port and port.public:
                return f"http://{port.ip}:{port.public_port}"
        return None

    def _price(self, gpus: int) -> tuple[Price | None, float | None]:
        prices: GpuPrice | None = self._call(
            f"runpod price {self.gpu_type}", self.api.gpu_price, self.gpu_type, gpus
        )
        if prices is None:
            return None, None
        per_gpu = prices.minimum_bid if self.outputs.market == "spot" else prices.on_demand
        if per_gpu is None:
            return None, prices.minimum_bid
        details = {
            "gpu_type": self.gpu_type,
            "gpu_count": gpus,
            "per_gpu": per_gpu,
            "minimum_bid_per_gpu": prices.minimum_bid,
            "on_demand_per_gpu": prices.on_demand,
        }
        return Price(round(per_gpu * gpus, 6), "USD", "api", details), prices.minimum_bid

    def price_now(self) -> Price:
        pod = self._pod()
        gpus = self._gpus(pod)
        price, _ = self._price(gpus)
        if price is None:
            return configured_price(self.config, reason=f"the API has no price for {self.gpu_type}")
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
        current = self.state()
        if current.running:
            return
        if current.status == "terminated":
            raise ControlPlaneError(f"{what}: the pod is terminated")
        gpus = self._gpus()
        if current.status == "stopped":
            _, minimum = self._price(gpus)
            if minimum is None:
                raise ControlPlaneError(f"{what}: the API gives no minimum bid for {self.gpu_type}")
            try:
                bid = capped_bid(minimum, self.max_bid)
            except RunpodError as exc:
                raise ControlPlaneError(f"{what}: {exc}") from None
            try:
                self._call(what, self.api.bid_resume, self.node, bid, gpus)
            except ControlPlaneError as exc:
                if any(w in str(exc).lower() for w in CAPACITY_WORDS):
                    raise CapacityError(str(exc)) from None
                raise
        state = wait_for(self.state, {"running"}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=what)
        got = state.details.get("gpu_count")
        if isinstance(got, int) and got < gpus:
            raise CapacityError(
                f"{what}: the pod came back with {got} GPU(s) instead of {gpus} (its machine's GPUs are "
                "taken); stop it and start it again later, or rent a new pod"
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
    bid_per_gpu: float,
    cloud_type: str,
    container_disk_gb: int,
    docker_args: str,
    ports: Sequence[str],
    env: Mapping[str, str],
    network_volume_id: str | None,
    data_center: str | None,
    volume_mount_path: str,
) -> dict[str, Any]:
    """The `PodRentInterruptableInput` of an interruptible pod."""
    value: dict[str, Any] = {
        "name": name,
        "imageName": image,
        "gpuTypeId": gpu_type,
        "gpuCount": gpu_count,
        "bidPerGpu": bid_per_gpu,
        "cloudType": cloud_type,
        "containerDiskInGb": container_disk_gb,
        "volumeInGb": 0,
        "dockerArgs": docker_args,
        "ports": ",".join(ports),
        "env": [{"key": k, "value": v} for k, v in sorted(env.items())],
        "volumeMountPath": volume_mount_path,
        "startSsh": False,
    }
    if network_volume_id:
        value["networkVolumeId"] = network_volume_id
    if data_center:
        value["dataCenterId"] = data_center
    return value
