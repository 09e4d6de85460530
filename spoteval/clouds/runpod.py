"""Runpod control plane: on-demand pods through Runpod's REST API v2 (standard library only).

Runpod offers no interruptible pods through any API it documents today (spoteval/providers.py,
`RUNPOD`, checked 2026-12-01): REST v1 (`interruptible` on `PodCreateInput`) was retired on
2026-11-15, REST v2's `CreatePodRequest` has no interruptible or bid field, and the GraphQL
`podRentInterruptable` / `podBidResume` were removed from the docs and announced for removal (the
GraphQL API itself retires in early 2027). So this plane speaks REST v2 only, one path for pods,
prices and network volumes, through the client in `spoteval.apis.runpod` (`RunpodApi`) that the
node agent's API stop and the Pulumi dynamic provider share.

- Credentials: `RUNPOD_API_KEY` (sent as `Authorization: Bearer`). Address: `RUNPOD_REST_URL`
  (default `spoteval.apis.runpod.DEFAULT_REST_URL`, `https://api.runpod.io/v2`). Tests point it at a fake.
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

from collections.abc import Mapping, Sequence
from typing import Any, Final

from spoteval.apis.runpod import GpuPrice, Pod
from spoteval.apis.runpod import RunpodApi as RunpodApi  # noqa: PLC0414 (re-exported)
from spoteval.apis.runpod import RunpodError as RunpodError  # noqa: PLC0414 (re-exported)
from spoteval.apis.runpod import number as _number
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
from spoteval.grant import above_price_cap
from spoteval.price import Price
from spoteval.providers import RUNPOD

#: Words of a start or create refused for lack of GPUs (worth retrying later)
#: [unconfirmed: the v2 API documents no capacity error code; checked 2026-12-01]
CAPACITY_WORDS: Final = (
    "no longer any instances available",
    "not enough free gpus",
    "no gpus available",
    "no instances available",
    "capacity",
)


def capped_price(per_gpu: float, max_per_gpu: float | None) -> float:
    """The price per GPU-hour a start would pay, refused above the grant's cap (the grant's rule,
    with a nano-unit's slack for the cap divided by the GPUs)."""
    if above_price_cap(per_gpu - 1e-9, max_per_gpu):
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
