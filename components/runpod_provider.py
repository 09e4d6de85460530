"""Pulumi dynamic providers for Runpod: an interruptible pod and a network volume.

The `pulumi-runpod` package cannot be imported as `pulumi_runpod` and creates only on-demand pods,
so a stack declares Runpod resources through these dynamic providers, whose create / update /
delete call Runpod's APIs with `spoteval.clouds.runpod.RunpodApi` (GraphQL for pods, REST for
network volumes). The API key is read from `RUNPOD_API_KEY` in the environment of `pulumi up`; it is
never stored in the stack's state.

`InterruptiblePod`:
- create: the minimum bid per GPU now (`gpuTypes ... lowestPrice { minimumBidPrice }`), refused when
  it is above `max_bid_per_gpu` (the grant's price cap per GPU), then `podRentInterruptable` at it;
  when `stopped` is set, `podStop` right after.
- update: `stopped` true -> `podStop`; false -> `podBidResume` at the capped minimum bid. Changes to
  what the pod is made of (image, GPU type or count, disks, start command, env, ports, volume) replace it.
- delete: `podTerminate` (the network volume with the weights stays: it is its own resource).

`NetworkVolume`: create `POST /networkvolumes`, grow with `PATCH`, delete `DELETE` (stacks protect
it and retain it on delete, so destroying compute never loses cached weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pulumi
import pulumi.dynamic as dyn

from spoteval.clouds.runpod import RunpodApi, RunpodError, capped_bid, pod_input

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


def bid_for(api: RunpodApi, gpu_type: str, gpu_count: int, max_bid: float | None) -> float:
    """The minimum bid per GPU now, refused above the grant's cap."""
    prices = api.gpu_price(gpu_type, gpu_count)
    if prices is None or prices.minimum_bid is None:
        raise RunpodError(f"runpod: no interruptible price for {gpu_type!r} x{gpu_count} right now")
    return capped_bid(prices.minimum_bid, max_bid)


class PodProvider(dyn.ResourceProvider):
    """create / update / delete of an interruptible pod through Runpod's GraphQL API."""

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        api = _api()
        gpus = int(props["gpu_count"])
        max_bid = props.get("max_bid_per_gpu")
        bid = bid_for(api, str(props["gpu_type"]), gpus, None if max_bid is None else float(max_bid))
        spec = pod_input(
            name=str(props["name"]),
            image=str(props["image"]),
            gpu_type=str(props["gpu_type"]),
            gpu_count=gpus,
            bid_per_gpu=bid,
            cloud_type=str(props["cloud_type"]),
            container_disk_gb=int(props["container_disk_gb"]),
            docker_args=str(props["docker_args"]),
            ports=list(props["ports"]),
            env=dict(props["env"]),
            network_volume_id=props.get("network_volume_id") or None,
            data_center=props.get("data_center") or None,
            volume_mount_path=str(props["volume_mount_path"]),
        )
        pod = api.rent_interruptable(spec)
        if props.get("stopped"):
            api.stop_pod(pod.id)
        return dyn.CreateResult(pod.id, {**props, "pod_id": pod.id, "bid_per_gpu": bid})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        keys = sorted(k for k in set(olds) | set(news) if k not in ("pod_id", "bid_per_gpu", "__provider"))
        changed = [k for k in keys if olds.get(k) != news.get(k)]
        replaces = [k for k in changed if k in POD_REPLACES]
        return dyn.DiffResult(
            changes=bool(changed), replaces=replaces, stables=["pod_id"], delete_before_replace=True
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        api = _api()
        bid = olds.get("bid_per_gpu")
        if bool(news.get("stopped")) != bool(olds.get("stopped")):
            if news.get("stopped"):
                api.stop_pod(id_)
            else:
                max_bid = news.get("max_bid_per_gpu")
                gpus = int(news["gpu_count"])
                bid = bid_for(api, str(news["gpu_type"]), gpus, None if max_bid is None else float(max_bid))
                api.bid_resume(id_, bid, gpus)
        return dyn.UpdateResult({**news, "pod_id": id_, "bid_per_gpu": bid})

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        pod = _api().pod(id_)
        if pod is None or pod.desired_status == "TERMINATED":
            return dyn.ReadResult(None, {})  # gone: the engine plans to create it again
        return dyn.ReadResult(id_, {**props, "pod_id": id_, "stopped": pod.desired_status == "EXITED"})

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


class InterruptiblePod(dyn.Resource):
    """A Runpod interruptible pod (see the module docstring); `pod_id` is the control plane's node id."""

    pod_id: pulumi.Output[str]
    bid_per_gpu: pulumi.Output[float]

    def __init__(
        self,
        name: str,
        *,
        pod_name: pulumi.Input[str],
        image: str,
        gpu_type: str,
        gpu_count: int,
        max_bid_per_gpu: float | None,
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
            "max_bid_per_gpu": max_bid_per_gpu,
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
            "bid_per_gpu": None,
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
