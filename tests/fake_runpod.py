"""A fake Runpod API on loopback: GraphQL at `/graphql` (pods, GPU prices) and REST at `/v1` (network
volumes), keeping every call so tests can assert the queries, mutations, variables and bids.

Pods follow Runpod's lifecycle as the control plane sees it: `podRentInterruptable` and
`podBidResume` leave a pod RUNNING without a runtime for `boot_polls` `pod` queries (starting), then
with one (ports published); `podStop` leaves it EXITED; `podTerminate` TERMINATED. A bid below the
GPU type's minimum bid is refused as Runpod refuses it. Requests without the API key get 401.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "rp-test-key"
_OPERATION = re.compile(r"^\s*(?:query|mutation)\s+(\w+)")


@dataclass
class FakePod:
    id: str
    gpu_type: str
    gpu_count: int
    desired_status: str = "RUNNING"
    bid: float = 0.0
    boot_polls_left: int = 0
    ip: str = "203.0.113.7"
    ports: list[tuple[int, int]] = field(default_factory=lambda: [(8000, 40123), (22, 40122)])
    comes_back_with_gpus: int | None = None  # Runpod may give the GPUs away while the pod is stopped
    input: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        runtime = None
        if self.desired_status == "RUNNING" and self.boot_polls_left <= 0:
            runtime = {
                "ports": [
                    {"ip": self.ip, "isIpPublic": True, "privatePort": p, "publicPort": q, "type": "tcp"}
                    for p, q in self.ports
                ]
                + [
                    {
                        "ip": "10.0.0.5",
                        "isIpPublic": False,
                        "privatePort": 8000,
                        "publicPort": 8000,
                        "type": "tcp",
                    }
                ]
            }
        return {
            "id": self.id,
            "name": self.input.get("name", self.id),
            "desiredStatus": self.desired_status,
            "costPerHr": round(self.bid * self.gpu_count, 4) if self.desired_status == "RUNNING" else 0,
            "gpuCount": self.gpu_count,
            "machineId": "m1",
            "lastStatusChange": "",
            "runtime": runtime,
        }


class FakeRunpod:
    def __init__(self, *, boot_polls: int = 2) -> None:
        self.lock = threading.Lock()
        self.calls: list[
            tuple[str, dict[str, Any]]
        ] = []  # (operation name or "METHOD /path", variables/body)
        self.pods: dict[str, FakePod] = {}
        self.prices: dict[str, dict[str, float]] = {
            "NVIDIA L4": {"minimumBidPrice": 0.19, "uninterruptablePrice": 0.43},
            "NVIDIA A40": {"minimumBidPrice": 0.24, "uninterruptablePrice": 0.44},
        }
        self.volumes: dict[str, dict[str, Any]] = {}
        self.boot_polls = boot_polls
        self.unauthorized = 0
        self._seq = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, answer = fake.handle(self.command, self.path, dict(self.headers), body)
                data = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "RUNPOD_API_KEY": API_KEY,
            "RUNPOD_API_BASE_URL": self.url,
            "RUNPOD_REST_URL": f"{self.url}/v1",
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add_pod(self, pod_id: str, gpu_type: str = "NVIDIA L4", gpu_count: int = 1, **kw: Any) -> FakePod:
        pod = FakePod(pod_id, gpu_type, gpu_count, **kw)
        self.pods[pod_id] = pod
        return pod

    def operations(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.calls]

    def variables(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [v for n, v in self.calls if n == name]

    # --- dispatch -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        if auth != f"Bearer {API_KEY}":
            with self.lock:
                self.unauthorized += 1
            return 401, {"error": "unauthorized"}
        if path == "/graphql" and method == "POST":
            doc = json.loads(body)
            m = _OPERATION.match(doc.get("query", ""))
            name = m.group(1) if m else "anonymous"
            variables = doc.get("variables") or {}
            with self.lock:
                self.calls.append((name, variables))
                try:
                    return 200, {"data": self._graphql(name, variables)}
                except LookupError as exc:
                    return 200, {"data": None, "errors": [{"message": str(exc)}]}
        if path.startswith("/v1/networkvolumes"):
            payload = json.loads(body) if body else {}
            with self.lock:
                self.calls.append((f"{method} {path}", payload))
                return self._volumes(method, path, payload)
        return 404, {"error": f"no route {method} {path}"}

    def _graphql(self, name: str, v: dict[str, Any]) -> dict[str, Any]:
        if name == "SpotEvalGpuPrice":
            price = self.prices.get(v["id"])
            if price is None:
                return {"gpuTypes": []}
            return {
                "gpuTypes": [
                    {
                        "id": v["id"],
                        "displayName": v["id"].split()[-1],
                        "communitySpotPrice": price["minimumBidPrice"],
                        "secureSpotPrice": price["minimumBidPrice"] + 0.05,
                        "lowestPrice": {k: round(x * 1.0, 4) for k, x in price.items()},
                    }
                ]
            }
        if name == "SpotEvalPod":
            pod = self.pods.get(v["podId"])
            if pod is None:
                return {"pod": None}
            answer = pod.to_json()
            if pod.desired_status == "RUNNING" and pod.boot_polls_left > 0:
                pod.boot_polls_left -= 1
            return {"pod": answer}
        if name == "SpotEvalPodStop":
            pod = self._pod(v["podId"])
            pod.desired_status = "EXITED"
            return {"podStop": {"id": pod.id, "desiredStatus": "EXITED"}}
        if name == "SpotEvalPodBidResume":
            pod = self._pod(v["podId"])
            minimum = self.prices[pod.gpu_type]["minimumBidPrice"]
            if v["bidPerGpu"] < minimum:
                raise LookupError(f"Your bid price is below the minimum bid price of {minimum}")
            pod.bid = v["bidPerGpu"]
            pod.desired_status = "RUNNING"
            pod.boot_polls_left = self.boot_polls
            if pod.comes_back_with_gpus is not None:
                pod.gpu_count = pod.comes_back_with_gpus
            return {"podBidResume": {"id": pod.id, "desiredStatus": "RUNNING", "costPerHr": pod.bid}}
        if name == "SpotEvalPodRent":
            spec = v["input"]
            minimum = self.prices[spec["gpuTypeId"]]["minimumBidPrice"]
            if spec["bidPerGpu"] < minimum:
                raise LookupError(f"Your bid price is below the minimum bid price of {minimum}")
            self._seq += 1
            pod = self.add_pod(
                f"pod{self._seq:04d}",
                spec["gpuTypeId"],
                spec["gpuCount"],
                bid=spec["bidPerGpu"],
                boot_polls_left=self.boot_polls,
                input=spec,
            )
            return {"podRentInterruptable": {"id": pod.id, "desiredStatus": "RUNNING", "costPerHr": pod.bid}}
        if name == "SpotEvalPodTerminate":
            self._pod(v["podId"]).desired_status = "TERMINATED"
            return {"podTerminate": None}
        raise LookupError(f"unknown operation {name}")

    def _pod(self, pod_id: str) -> FakePod:
        pod = self.pods.get(pod_id)
        if pod is None or pod.desired_status == "TERMINATED":
            raise LookupError(f"pod {pod_id} not found")
        return pod

    def _volumes(self, method: str, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if method == "POST" and len(parts) == 2:
            self._seq += 1
            volume = {"id": f"vol{self._seq:04d}", **payload}
            self.volumes[volume["id"]] = volume
            return 200, volume
        if len(parts) != 3 or parts[2] not in self.volumes:
            return 404, {"error": "not found"}
        volume = self.volumes[parts[2]]
        if method == "GET":
            return 200, volume
        if method == "PATCH":
            volume.update(payload)
            return 200, volume
        if method == "DELETE":
            del self.volumes[parts[2]]
            return 204, None
        return 405, {"error": method}
