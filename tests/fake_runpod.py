"""A fake Runpod REST API v2 on loopback (`/v2`: pods, pod actions, the GPU catalog, network
volumes), keeping every call so tests can assert the operations and their bodies.

Pods follow Runpod's lifecycle as the control plane sees it: `createPod` and the `start` action
leave a pod RUNNING without a runtime for `boot_polls` `getPod` reads (starting), then with one
(ports published); `stop` leaves it EXITED; `terminate` (or `deletePod`) TERMINATED, after which
reads answer 404. An action not valid for the pod's status answers 409, as Runpod does. Requests
without the API key get 401. Operation names are the OpenAPI operationIds.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "rp-test-key"
_VALID: dict[str, set[str]] = {
    "RUNNING": {"stop", "restart", "terminate"},
    "EXITED": {"start", "terminate"},
    "ERROR": {"start", "terminate"},
    "PROVISIONING": {"stop", "terminate"},
    "STARTING": {"stop", "terminate"},
}


@dataclass
class FakePod:
    id: str
    gpu_type: str
    gpu_count: int
    status: str = "RUNNING"
    cloud: str = "SECURE"
    boot_polls_left: int = 0
    ip: str = "203.0.113.7"
    private_ip: str = "10.65.1.42"
    ports: list[tuple[int, int]] = field(default_factory=lambda: [(8000, 40123), (22, 40122)])
    comes_back_with_gpus: int | None = None  # Runpod may give the GPUs away while the pod is stopped
    cost: float = 0.43
    input: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        running = self.status == "RUNNING" and self.boot_polls_left <= 0
        runtime: dict[str, Any] = {}
        if running:
            runtime = {
                "uptime": 10,
                "ports": [{"ip": self.ip, "private": p, "public": q, "type": "tcp"} for p, q in self.ports],
            }
        return {
            "id": self.id,
            "name": self.input.get("name", self.id),
            "status": self.status,
            "actions": sorted(_VALID.get(self.status, set())),
            "gpu": {"id": self.gpu_type, "count": self.gpu_count},
            "cloud": self.cloud,
            "cost": self.cost * self.gpu_count if self.status == "RUNNING" else 0.0,
            "runtime": runtime,
            "globalNetworking": {"enabled": True, "ip": self.private_ip},
        }


class FakeRunpod:
    def __init__(self, *, boot_polls: int = 2) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, dict[str, Any]]] = []  # (operationId, path ids and body)
        self.pods: dict[str, FakePod] = {}
        self.prices: dict[str, dict[str, float]] = {
            "NVIDIA L4": {"secure": 0.43, "community": 0.31},
            "NVIDIA A40": {"secure": 0.40, "community": 0.35},
        }
        self.volumes: dict[str, dict[str, Any]] = {}
        self.start_refusal: str | None = None  # the detail of a 4xx answer to the next `start`
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
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v2"

    @property
    def env(self) -> dict[str, str]:
        return {"RUNPOD_API_KEY": API_KEY, "RUNPOD_REST_URL": self.url}

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

    def actions(self, action: str) -> list[str]:
        """Pod ids the `action` was asked for, in order."""
        return [v["id"] for v in self.variables("podAction") if v.get("action") == action]

    # --- dispatch -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        if auth != f"Bearer {API_KEY}":
            with self.lock:
                self.unauthorized += 1
            return 401, {"title": "Unauthorized", "status": 401, "detail": "bad key"}
        parts = [urllib.parse.unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
        if not parts or parts[0] != "v2":
            return 404, {"title": "Not Found", "status": 404, "detail": f"no route {method} {path}"}
        payload = json.loads(body) if body else {}
        with self.lock:
            return self._route(method, parts[1:], payload)

    def _error(self, status: int, detail: str) -> tuple[int, Any]:
        return status, {"title": "Error", "status": status, "detail": detail}

    def _route(self, method: str, parts: list[str], payload: dict[str, Any]) -> tuple[int, Any]:
        if parts[:2] == ["catalog", "gpus"] and len(parts) == 3 and method == "GET":
            self.calls.append(("getGpuType", {"id": parts[2]}))
            price = self.prices.get(parts[2])
            if price is None:
                return self._error(404, "gpu type not found")
            return 200, {"id": parts[2], "name": parts[2].split()[-1], "price": dict(price)}
        if parts[0] == "pods":
            return self._pods(method, parts[1:], payload)
        if parts[0] == "network-volumes":
            return self._volumes(method, parts[1:], payload)
        return self._error(404, f"no route {method} /{'/'.join(parts)}")

    def _pods(self, method: str, rest: list[str], payload: dict[str, Any]) -> tuple[int, Any]:
        if not rest and method == "POST":
            self.calls.append(("createPod", payload))
            gpu = payload["gpu"]
            if gpu["id"] not in self.prices:
                return self._error(422, f"There are no instances available for {gpu['id']}")
            self._seq += 1
            created = self.add_pod(
                f"pod{self._seq:04d}",
                gpu["id"],
                gpu.get("count", 1),
                status="PROVISIONING" if self.boot_polls else "RUNNING",
                cloud=payload.get("cloud", "SECURE"),
                boot_polls_left=self.boot_polls,
                cost=self.prices[gpu["id"]]["secure" if payload.get("cloud") != "COMMUNITY" else "community"],
                input=payload,
            )
            return 201, created.to_json()
        pod = self.pods.get(rest[0]) if rest else None
        if len(rest) == 1 and method == "GET":
            self.calls.append(("getPod", {"id": rest[0]}))
            if pod is None or pod.status == "TERMINATED":
                return self._error(404, "pod not found")
            answer = pod.to_json()
            if pod.boot_polls_left > 0:
                pod.boot_polls_left -= 1
                if pod.boot_polls_left == 0 and pod.status in ("PROVISIONING", "STARTING"):
                    pod.status = "RUNNING"
            return 200, answer
        if len(rest) == 1 and method == "DELETE":
            self.calls.append(("deletePod", {"id": rest[0]}))
            if pod is None or pod.status == "TERMINATED":
                return self._error(404, "pod not found")
            pod.status = "TERMINATED"
            return 204, None
        if len(rest) == 2 and rest[1] == "action" and method == "POST":
            action = payload.get("action", "")
            self.calls.append(("podAction", {"id": rest[0], "action": action}))
            if pod is None or pod.status == "TERMINATED":
                return self._error(404, "pod not found")
            if action not in _VALID.get(pod.status, set()):
                return self._error(409, f"action {action} not valid for status {pod.status}")
            if action == "stop":
                pod.status = "EXITED"
            elif action == "terminate":
                pod.status = "TERMINATED"
                return 204, None
            elif action == "start":
                if self.start_refusal is not None:
                    detail, self.start_refusal = self.start_refusal, None
                    return self._error(422, detail)
                pod.status = "STARTING" if self.boot_polls else "RUNNING"
                pod.boot_polls_left = self.boot_polls
                if pod.comes_back_with_gpus is not None:
                    pod.gpu_count = pod.comes_back_with_gpus
            return 200, pod.to_json()
        return self._error(405, method)

    def _volumes(self, method: str, rest: list[str], payload: dict[str, Any]) -> tuple[int, Any]:
        if not rest and method == "POST":
            self.calls.append(("createNetworkVolume", payload))
            self._seq += 1
            volume = {"id": f"vol{self._seq:04d}", "type": "STANDARD", **payload}
            self.volumes[volume["id"]] = volume
            return 201, volume
        name = {"GET": "getNetworkVolume", "PATCH": "updateNetworkVolume", "DELETE": "deleteNetworkVolume"}
        self.calls.append((name.get(method, method), {"id": rest[0] if rest else "", **payload}))
        if len(rest) != 1 or rest[0] not in self.volumes:
            return self._error(404, "network volume not found")
        volume = self.volumes[rest[0]]
        if method == "GET":
            return 200, volume
        if method == "PATCH":
            if int(payload.get("size", volume["size"])) < int(volume["size"]):
                return self._error(400, "network volume storage cannot be reduced")
            volume.update(payload)
            return 200, volume
        if method == "DELETE":
            del self.volumes[rest[0]]
            return 204, None
        return self._error(405, method)
