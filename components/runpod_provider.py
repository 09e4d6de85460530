"""Pulumi dynamic providers for Runpod: an on-demand pod and a network volume.

The `pulumi-runpod` package cannot be imported as `pulumi_runpod`, so a stack declares Runpod
resources through these dynamic providers, whose create / update / delete call Runpod's REST API v2
with `spoteval.clouds.runpod.RunpodApi` (one path for pods, prices and volumes; Runpod offers no
interruptible pods through any current API: spoteval/providers.py). The API key is read from
`RUNPOD_API_KEY` in the environment of `pulumi up`; it is never stored in the stack's state.

`RunpodPod`:
- create: the list price per GPU of the pod's cloud now (`GET /v2/catalog/gpus/{id}`), refused when
  it is above `max_price_per_gpu` (the grant's price cap per GPU), then `POST /v2/pods`; when
  `stopped` is set, the `stop` action right after.
- update: `stopped` true -> `stop`; false -> the price read again, then `start`. Changes to what the
  pod is made of (image, GPU type or count, cloud, disks, start command, env, ports, volume) replace
  it, deleting the old pod first (it holds the network volume's mount).
- delete: `DELETE /v2/pods/{id}` (the network volume with the weights stays: it is its own resource).

`NetworkVolume`: create `POST /v2/network-volumes`, grow with `PATCH`, delete `DELETE` (stacks
protect it and retain it on delete, so destroying compute never loses cached weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pulumi
import pulumi.dynamic as dyn

from spoteval.clouds.runpod import RunpodApi, RunpodError, capped_price, pod_input

#: inputs whose change needs a new pod
POD_REPLACES: Final = (
    "name",
    "image",
    "gpu_type",
    "gpu_count",
    "cloud_type",
    "container_disk_gb",
    "docker_args",
    "ports",
    "env",
    "network_volume_id",
    "data_center",
    "volume_mount_path",
)


def _api() -> RunpodApi:
    try:
        return RunpodApi.from_env()
    except RunpodError as exc:
        raise RuntimeError(str(exc)) from None


def price_for(api: RunpodApi, gpu_type: str, cloud: str, max_price: float | None) -> float:
    """The list price per GPU-hour of `cloud` now, refused above the grant's cap."""
    prices = api.gpu_price(gpu_type)
    per_gpu = None if prices is None else prices.of(cloud)
    if per_gpu is None:
        raise RunpodError(f"runpod: no {cloud} price for {gpu_type!r} in the catalog right now")
    return capped_price(per_gpu, max_price)


def _cap(props: dict[str, Any]) -> float | None:
    value = props.get("max_price_per_gpu")
    return None if value is None else float(value)


class PodProvider(dyn.ResourceProvider):
    """create / update / delete of an on-demand pod through Runpod's REST API v2."""

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        api = _api()
        price = price_for(api, str(props["gpu_type"]), str(props["cloud_type"]), _cap(props))
        spec = pod_input(
            name=str(props["name"]),
            image=str(props["image"]),
            gpu_type=str(props["gpu_type"]),
            gpu_count=int(props["gpu_count"]),
            cloud_type=str(props["cloud_type"]),
            container_disk_gb=int(props["container_disk_gb"]),
            docker_args=str(props["docker_args"]),
            ports=list(props["ports"]),
            env=dict(props["env"]),
            network_volume_id=props.get("network_volume_id") or None,
            data_center=props.get("data_center") or None,
            volume_mount_path=str(props["volume_mount_path"]),
        )
        pod = api.create_pod(spec)
        if props.get("stopped"):
            api.stop_pod(pod.id)
        return dyn.CreateResult(pod.id, {**props, "pod_id": pod.id, "price_per_gpu": price})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        keys = sorted(k for k in set(olds) | set(news) if k not in ("pod_id", "price_per_gpu", "__provider"))
        changed = [k for k in keys if olds.get(k) != news.get(k)]
        replaces = [k for k in changed if k in POD_REPLACES]
        return dyn.DiffResult(
            changes=bool(changed), replaces=replaces, stables=["pod_id"], delete_before_replace=True
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        api = _api()
        price = olds.get("price_per_gpu")
        if bool(news.get("stopped")) != bool(olds.get("stopped")):
            if news.get("stopped"):
                api.stop_pod(id_)
            else:
                price = price_for(api, str(news["gpu_type"]), str(news["cloud_type"]), _cap(news))
                api.action(id_, "start")
        return dyn.UpdateResult({**news, "pod_id": id_, "price_per_gpu": price})

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        pod = _api().pod(id_)
        if pod is None or pod.status == "terminated":
            return dyn.ReadResult(None, {})  # gone: the engine plans to create it again
        return dyn.ReadResult(id_, {**props, "pod_id": id_, "stopped": pod.status == "stopped"})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        api = _api()
        if api.pod(id_) is not None:
            api.terminate_pod(id_)


class VolumeProvider(dyn.ResourceProvider):
    """A Runpod network volume through the REST API."""

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        volume = _api().create_network_volume(
            str(props["name"]), int(props["size_gb"]), str(props["data_center"])
        )
        return dyn.CreateResult(str(volume["id"]), {**props, "volume_id": str(volume["id"])})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [k for k in ("name", "data_center") if olds.get(k) != news.get(k)]
        if int(news.get("size_gb", 0)) < int(olds.get("size_gb", 0)):
            replaces.append("size_gb")  # a network volume only grows
        changed = bool(replaces) or olds.get("size_gb") != news.get("size_gb")
        return dyn.DiffResult(changes=changed, replaces=replaces, stables=["volume_id"])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        _api().resize_network_volume(id_, int(news["size_gb"]))
        return dyn.UpdateResult({**news, "volume_id": id_})

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        volume = _api().network_volume(id_)
        if volume is None:
            return dyn.ReadResult(None, {})
        return dyn.ReadResult(id_, {**props, "volume_id": id_, "size_gb": int(volume.get("size") or 0)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        api = _api()
        if api.network_volume(id_) is not None:
            api.delete_network_volume(id_)


class RunpodPod(dyn.Resource):
    """A Runpod on-demand pod (see the module docstring); `pod_id` is the control plane's node id."""

    pod_id: pulumi.Output[str]
    price_per_gpu: pulumi.Output[float]

    def __init__(
        self,
        name: str,
        *,
        pod_name: pulumi.Input[str],
        image: str,
        gpu_type: str,
        gpu_count: int,
        max_price_per_gpu: float | None,
        cloud_type: str,
        container_disk_gb: int,
        docker_args: pulumi.Input[str],
        ports: list[str],
        env: pulumi.Input[Mapping[str, pulumi.Input[str]]],
        network_volume_id: pulumi.Input[str] | None,
        data_center: str | None,
        volume_mount_path: str,
        stopped: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "name": pod_name,
            "image": image,
            "gpu_type": gpu_type,
            "gpu_count": gpu_count,
            "max_price_per_gpu": max_price_per_gpu,
            "cloud_type": cloud_type,
            "container_disk_gb": container_disk_gb,
            "docker_args": docker_args,
            "ports": ports,
            "env": env,
            "network_volume_id": network_volume_id,
            "data_center": data_center,
            "volume_mount_path": volume_mount_path,
            "stopped": stopped,
            "pod_id": None,
            "price_per_gpu": None,
        }
        super().__init__(PodProvider(), name, props, opts)


class NetworkVolume(dyn.Resource):
    """A Runpod network volume (the weights cache); `volume_id` is what pods mount."""

    volume_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        volume_name: pulumi.Input[str],
        size_gb: int,
        data_center: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"name": volume_name, "size_gb": size_gb, "data_center": data_center, "volume_id": None}
        super().__init__(VolumeProvider(), name, props, opts)
