"""Kubernetes control plane (kubernetes client): the model server Deployment's pod.

The cluster comes from the kubeconfig (`KUBECONFIG`, current context) or, inside a cluster, the
service account. The plane drives the model server's Deployment: `deployment` from the options,
a node id `NAMESPACE/NAME`, or else the one the Pulumi program declares, `{run_id}-server`, in the
stack's `k8s.namespace` (default `spot-eval`); the stack's node id (its episode Job) names the node
in the record.

- Stop: delete the Deployment's running pod and wait until it is gone. The Deployment's controller
  creates the replacement at once, so a stopped pod never stays stopped (`can_stay_stopped` False);
  scaling the Deployment is its owner's decision.
- Start: wait for the controller's replacement pod to be Ready. The capacity wait shows here: the
  pod stays Pending until the cluster has a (spot) node for it.
- Preemption: evict the pod through the Eviction API, as a node drain does, and wait until it is gone.
- State: from the pods the Deployment's selector matches: Ready -> running, Pending or not yet
  Ready -> pending, only terminating -> stopping, none -> stopped.
- Address: `address_kind` `pod`: the Ready pod's IP; otherwise the Service whose selector matches
  the pods: its load balancer's address, else its cluster IP.
- Price: the configured one (a pod's share of a node is not priced by the cluster).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from spoteval.apis import kubeconfig
from spoteval.clouds.base import (
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    StackOutputs,
    configured_price,
    provider_options,
)
from spoteval.price import Price
from spoteval.providers import KUBERNETES

#: The namespace the stack config's `k8s.namespace` defaults to.
DEFAULT_NAMESPACE: Final = "spot-eval"


@dataclass(frozen=True)
class KubernetesOptions:
    """The kubernetes plane's own options (the stack's `k8s` block): `namespace` and `deployment`
    (the model server's)."""

    namespace: str | None = None
    deployment: str | None = None

    @classmethod
    def parse(cls, options: PlaneOptions) -> KubernetesOptions:
        return provider_options(cls, options, "kubernetes", "k8s")


def model_server_deployment(outputs: StackOutputs, node: str, config: PlaneOptions) -> tuple[str, str]:
    """(namespace, name) of the model server's Deployment.

    The options' `deployment` when given; else a node id of the form NAMESPACE/NAME; else the
    Deployment the Pulumi program declares for the run, `{run_id}-server`, in the options' `namespace`.
    """
    own = KubernetesOptions.parse(config)
    namespace = own.namespace or DEFAULT_NAMESPACE
    if own.deployment:
        return namespace, own.deployment
    parts = node.removeprefix("deployment/").split("/")
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    if len(parts) != 1 or not parts[0]:
        raise ControlPlaneError(f"kubernetes node {node!r}: expected NAMESPACE/DEPLOYMENT or a name")
    return namespace, f"{outputs.run_id}-server"


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _terminating(pod: Any) -> bool:
    return pod.metadata.deletion_timestamp is not None


class KubernetesPlane:
    provider = "kubernetes"
    restarts_itself = KUBERNETES.restarts_itself
    can_stay_stopped = KUBERNETES.can_stay_stopped

    def __init__(
        self, outputs: StackOutputs, node: str, config: PlaneOptions, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
    ) -> None:
        self.outputs = outputs
        self.node = node
        self.config = config
        self.core = core
        self.apps = apps
        self.namespace, self.name = model_server_deployment(outputs, node, config)
        self._selector: dict[str, str] | None = None
        self._stopped_uid: str | None = None

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> KubernetesPlane:
        api = kubeconfig.api_client(ControlPlaneError)
        return cls(outputs, node, config, k8s.CoreV1Api(api), k8s.AppsV1Api(api))

    @property
    def _where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _fail(self, verb: str, exc: ApiException) -> ControlPlaneError:
        return ControlPlaneError(f"kubernetes {verb} {self._where}: {exc.status} {exc.reason}")

    def selector(self) -> dict[str, str]:
        if self._selector is None:
            try:
                deployment = self.apps.read_namespaced_deployment(self.name, self.namespace)
            except ApiException as exc:
                raise self._fail("read deployment", exc) from None
            labels = (
                deployment.spec.selector.match_labels
                if deployment.spec and deployment.spec.selector
                else None
            )
            if not labels:
                raise ControlPlaneError(f"kubernetes deployment {self._where}: no matchLabels selector")
            self._selector = dict(labels)
        return self._selector

    def pods(self) -> list[Any]:
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(self.selector().items()))
        try:
            reply = self.core.list_namespaced_pod(self.namespace, label_selector=label_selector)
        except ApiException as exc:
            raise self._fail("list pods", exc) from None
        return list(reply.items or [])

    def state(self) -> NodeState:
        pods = self.pods()
        live = [p for p in pods if not _terminating(p)]
        ready = [p for p in live if _ready(p)]
        names = {"pods": sorted(p.metadata.name for p in pods)}
        if ready:
            return NodeState("running", "Ready", names)
        if live:
            phase = live[0].status.phase if live[0].status else None
            return NodeState("pending", str(phase or "Pending"), names)
        if pods:
            return NodeState("stopping", "Terminating", names)
        return NodeState("stopped", "no pods", names)

    def _current(self) -> Any | None:
        live = [p for p in self.pods() if not _terminating(p)]
        live.sort(key=lambda p: not _ready(p))
        return live[0] if live else None

    def address(self) -> str | None:
        if self.outputs.address_kind == "pod":
            pod = self._current()
            return pod.status.pod_ip if pod is not None and pod.status else None
        labels = self.selector()
        try:
            services = self.core.list_namespaced_service(self.namespace).items or []
        except ApiException as exc:
            raise self._fail("list services", exc) from None
        for service in services:
            chosen = service.spec.selector if service.spec else None
            if not chosen or any(labels.get(k) != v for k, v in chosen.items()):
                continue
            ingress = (
                service.status.load_balancer.ingress
                if service.status and service.status.load_balancer
                else None
            ) or []
            for entry in ingress:
                if entry.ip or entry.hostname:
                    return str(entry.ip or entry.hostname)
            cluster_ip = service.spec.cluster_ip if service.spec else None
            if cluster_ip and cluster_ip != "None":
                return str(cluster_ip)
        return None

    def price_now(self) -> Price:
        return configured_price(
            self.config, reason="a pod's node is priced by its node pool, not the cluster"
        )

    def _gone(self, name: str, uid: str) -> bool:
        try:
            pod = self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise self._fail("read pod", exc) from None
        return pod.metadata is None or pod.metadata.uid != uid

    def _remove(self, verb: str, timeout_s: float, evict: bool) -> None:
        pod = self._current()
        if pod is None:
            return
        name, uid = pod.metadata.name, pod.metadata.uid
        try:
            if evict:
                body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=self.namespace))
                self.core.create_namespaced_pod_eviction(name, self.namespace, body)
            else:
                self.core.delete_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            raise self._fail(f"{verb} pod {name}", exc) from None
        self._stopped_uid = uid
        deadline = time.monotonic() + timeout_s
        while not self._gone(name, uid):
            if time.monotonic() >= deadline:
                raise ControlPlaneError(
                    f"kubernetes {verb} {self._where}: pod {name} still there after {timeout_s:g} s"
                )
            time.sleep(self.config.poll_s)

    def stop(self, timeout_s: float) -> None:
        self._remove("delete", timeout_s, evict=False)

    def start(self, timeout_s: float) -> None:
        """Wait for a Ready pod other than the one stopped (the controller creates it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = [p for p in self.pods() if not _terminating(p) and p.metadata.uid != self._stopped_uid]
            if any(_ready(p) for p in live):
                return
            if time.monotonic() >= deadline:
                phases = ", ".join(f"{p.metadata.name}: {p.status.phase if p.status else '?'}" for p in live)
                raise ControlPlaneError(
                    f"kubernetes start {self._where}: no Ready pod after {timeout_s:g} s "
                    f"({phases or 'no pods'})"
                )
            time.sleep(self.config.poll_s)

    def simulate_preemption(self, timeout_s: float) -> str:
        self._remove("evict", timeout_s, evict=True)
        return "eviction"
