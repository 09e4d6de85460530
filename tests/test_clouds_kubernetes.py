"""Kubernetes control plane against a loopback API server that plays a Deployment's controller."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from scripts.measure_restart import main as measure_main
from spoteval import standin
from spoteval.clouds import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.clouds.kubernetes import KubernetesPlane, model_server_deployment
from spoteval.record import Event
from spoteval.store import Store
from tests.fake_api import FakeApi, Reply, Request

NS = "evals"
PODS = f"/api/v1/namespaces/{NS}/pods"


class Cluster:
    """One Deployment `model` (selector app=model) whose controller replaces a deleted pod.

    A deleted or evicted pod stays Terminating for `grace` s; the replacement is created at once,
    Pending for `schedule` s (the capacity wait), then Running and Ready.
    """

    def __init__(self, grace: float = 0.15, schedule: float = 0.3) -> None:
        self.grace = grace
        self.schedule = schedule
        self.pods: dict[str, dict[str, Any]] = {}
        self.n = 0
        self.add_pod(ready_at=0.0)

    def add_pod(self, ready_at: float) -> str:
        self.n += 1
        name = f"model-7d9f-{self.n}"
        self.pods[name] = {"uid": str(uuid.uuid4()), "ready_at": ready_at, "gone_at": None, "n": self.n}
        return name

    def pod_json(self, name: str) -> dict[str, Any]:
        pod, now = self.pods[name], time.monotonic()
        ready = now >= pod["ready_at"]
        meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": pod["uid"], "labels": {"app": "model"}}
        if pod["gone_at"] is not None:
            meta["deletionTimestamp"] = "2026-11-30T05:00:00Z"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}], "nodeName": "spot-1"},
            "status": {
                "phase": "Running" if ready else "Pending",
                "podIP": f"10.8.0.{pod['n']}" if ready else None,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def live_names(self) -> list[str]:
        now = time.monotonic()
        return [n for n, p in self.pods.items() if p["gone_at"] is None or now < p["gone_at"]]

    def remove(self, name: str) -> None:
        self.pods[name]["gone_at"] = time.monotonic() + self.grace
        self.add_pod(ready_at=time.monotonic() + self.schedule)

    def handle(self, r: Request) -> Reply:
        if r.path == f"/apis/apps/v1/namespaces/{NS}/deployments/model" and r.method == "GET":
            return (
                200,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "model", "namespace": NS},
                    "spec": {
                        "selector": {"matchLabels": {"app": "model"}},
                        "template": {"metadata": {"labels": {"app": "model"}}, "spec": {"containers": []}},
                    },
                },
                {},
            )
        if r.path == PODS and r.method == "GET":
            assert r.query.get("labelSelector") == "app=model"
            items = [self.pod_json(n) for n in self.live_names()]
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}, {}
        if r.path == f"/api/v1/namespaces/{NS}/services" and r.method == "GET":
            service = {
                "metadata": {"name": "model", "namespace": NS},
                "spec": {"selector": {"app": "model"}, "clusterIP": "10.96.0.20", "ports": [{"port": 8000}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
            }
            other = {
                "metadata": {"name": "other", "namespace": NS},
                "spec": {"selector": {"app": "other"}, "clusterIP": "10.96.0.99"},
            }
            return (
                200,
                {"apiVersion": "v1", "kind": "ServiceList", "metadata": {}, "items": [other, service]},
                {},
            )
        if r.path.startswith(PODS + "/"):
            rest = r.path[len(PODS) + 1 :]
            name, _, sub = rest.partition("/")
            if name not in self.live_names():
                return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}, {}
            if r.method == "GET" and not sub:
                return 200, self.pod_json(name), {}
            if (r.method == "DELETE" and not sub) or (r.method == "POST" and sub == "eviction"):
                if r.method == "POST":
                    assert r.body["metadata"]["name"] == name
                self.remove(name)
                if r.method == "POST":
                    return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, {}
                return 200, self.pod_json(name), {}
        return 404, {"kind": "Status", "code": 404, "message": f"no route {r.method} {r.path}"}, {}


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, FakeApi]]:
    state = Cluster()
    api = FakeApi(state.handle)
    try:
        yield state, api
    finally:
        api.close()


def _raw_outputs(address_kind: str = "service") -> dict[str, Any]:
    return {
        "provider": "kubernetes",
        "region": "gke-us-central1",
        "zone": None,
        "node_ids": [f"{NS}/model"],
        "instance_type": "g2-standard-8",
        "market": "spot",
        "bucket_url": "gs://results/evals",
        "run_id": "r1",
        "server_port": 8000,
        "address_kind": address_kind,
    }


def outputs(address_kind: str = "service") -> StackOutputs:
    return StackOutputs.parse(_raw_outputs(address_kind))


def plane(api: FakeApi, address_kind: str = "service", price: float | None = 0.85) -> KubernetesPlane:
    config = k8s.Configuration()
    config.host = api.url
    client = k8s.ApiClient(config)
    return KubernetesPlane(
        outputs(address_kind),
        f"{NS}/model",
        PlaneOptions(configured_price=price, poll_s=0.02),
        k8s.CoreV1Api(client),
        k8s.AppsV1Api(client),
    )


def test_state_is_running_when_the_deployments_pod_is_ready(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    state = plane(api).state()
    assert (state.status, state.raw) == ("running", "Ready")
    assert state.details["pods"] == ["model-7d9f-1"]


def test_address_is_the_matching_services_load_balancer(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    assert plane(api).address() == "203.0.113.7"


def test_pod_address_kind_gives_the_ready_pods_ip(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    assert plane(api, "pod").address() == "10.8.0.1"


def test_stop_deletes_the_pod_and_waits_until_it_is_gone(cluster: tuple[Cluster, FakeApi]) -> None:
    state, api = cluster
    p = plane(api)
    t0 = time.monotonic()
    p.stop(timeout_s=5)
    assert time.monotonic() - t0 >= state.grace - 0.05
    [delete] = api.calls("DELETE")
    assert delete.path == f"{PODS}/model-7d9f-1"
    assert "model-7d9f-1" not in state.live_names()
    assert p.state().status == "pending"  # the controller's replacement is not Ready yet


def test_start_waits_for_the_controllers_replacement_to_be_ready(cluster: tuple[Cluster, FakeApi]) -> None:
    state, api = cluster
    p = plane(api, "pod")
    p.stop(timeout_s=5)
    t0 = time.monotonic()
    p.start(timeout_s=5)
    assert time.monotonic() - t0 >= state.schedule - state.grace - 0.1
    assert p.state().running
    assert p.address() == "10.8.0.2"  # the replacement pod, with its own IP


def test_preemption_is_an_eviction_through_the_eviction_api(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    p = plane(api)
    assert p.simulate_preemption(timeout_s=5) == "eviction"
    [evict] = api.calls("POST", "/eviction")
    assert evict.path == f"{PODS}/model-7d9f-1/eviction"
    assert api.calls("DELETE") == []


def test_state_is_stopping_while_only_a_terminating_pod_is_left(cluster: tuple[Cluster, FakeApi]) -> None:
    state, api = cluster
    state.pods["model-7d9f-1"]["gone_at"] = time.monotonic() + 10
    assert plane(api).state().status == "stopping"
    state.pods["model-7d9f-1"]["gone_at"] = time.monotonic() - 1
    assert plane(api).state().status == "stopped"


def test_start_times_out_naming_the_pending_pod(cluster: tuple[Cluster, FakeApi]) -> None:
    state, api = cluster
    state.schedule = 60  # no spot node for the replacement
    p = plane(api)
    p.stop(timeout_s=5)
    with pytest.raises(ControlPlaneError, match=r"no Ready pod after 0\.3 s \(model-7d9f-2: Pending\)"):
        p.start(timeout_s=0.3)


def test_price_is_the_configured_one_or_unknown(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    price = plane(api).price_now()
    assert (price.per_hour, price.source) == (0.85, "configured")
    assert plane(api, price=None).price_now().source == "unknown"


def test_a_pod_cannot_stay_stopped_under_its_controller(cluster: tuple[Cluster, FakeApi]) -> None:
    _, api = cluster
    p = plane(api)
    assert p.restarts_itself and not p.can_stay_stopped


def test_the_model_server_deployment_is_found_from_the_stack() -> None:
    out = outputs()  # run_id r1; the Pulumi program names the model server's Deployment r1-server
    assert model_server_deployment(out, "r1-episodes", PlaneOptions()) == ("spot-eval", "r1-server")
    assert model_server_deployment(
        out, "r1-episodes", PlaneOptions(providers={"k8s": {"namespace": "evals"}})
    ) == (
        "evals",
        "r1-server",
    )
    assert model_server_deployment(out, "evals/model", PlaneOptions()) == ("evals", "model")
    assert model_server_deployment(
        out, "x", PlaneOptions(providers={"kubernetes": {"deployment": "vllm"}})
    ) == ("spot-eval", "vllm")
    with pytest.raises(ControlPlaneError, match="NAMESPACE/DEPLOYMENT"):
        model_server_deployment(out, "a/b/c", PlaneOptions())


def test_k8s_is_the_stacks_name_for_the_kubernetes_provider() -> None:
    from spoteval.clouds import PROVIDERS

    assert PROVIDERS["k8s"] is PROVIDERS["kubernetes"]


def test_connect_without_a_cluster_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ControlPlaneError, match=r"no usable kubeconfig .* and not in a cluster"):
        KubernetesPlane.connect(outputs(), f"{NS}/model", PlaneOptions())


def test_measure_restart_on_kubernetes_deletes_the_pod_and_times_the_replacement(
    cluster: tuple[Cluster, FakeApi], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole script on a k8s stack: kubeconfig -> the fake API server, the record in a folder."""
    state, api = cluster
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "ops", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "ops"}}],
                "current-context": "fake",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    raw = {**_raw_outputs(), "provider": "k8s", "node_ids": ["r1-episodes"]}
    raw["bucket_url"] = f"file://{tmp_path}/store"
    (tmp_path / "outputs.json").write_text(json.dumps(raw))
    server = standin.serve("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        code = measure_main(
            [
                "--outputs", str(tmp_path / "outputs.json"),
                "--k8s-namespace", NS, "--k8s-deployment", "model",
                "--health-url", server.base_url, "--price", "0.85",
                "--poll", "0.02", "--cycles", "2", "--yes", "--json",
            ]
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    assert len(api.calls("DELETE")) == 2  # one pod deleted per cycle
    store = Store(f"file://{tmp_path}/store")
    events = [Event.loads(store.get(k) or b"")[0] for k in store.list("runs/r1/events/")]
    assert [(e.kind, e.reason) for e in events] == [
        ("stop", "measurement"),
        ("start", "measurement"),
        ("heartbeat", None),
        ("stop", "measurement"),
        ("start", "measurement"),
        ("heartbeat", None),
    ]  # no final stop: the controller keeps a pod running
    assert all(e.price_source == "configured" and e.price_per_hour == 0.85 for e in events)
    for beat in (e for e in events if e.kind == "heartbeat"):
        # start = the replacement's scheduling wait, after the old pod was gone
        assert beat.details["measured"]["start"] >= state.schedule - state.grace - 0.1
