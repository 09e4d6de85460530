"""A fake Nebius API on loopback: a plaintext gRPC server speaking `nebius.compute.v1.InstanceService`
(Get, Stop, Start) and `nebius.billing.v1alpha1.SpotPriceService` (List) with the SDK's own messages,
plus the VM's instance metadata service (HTTP, `Metadata: true` required) for the agent's API stop.

Instances follow Nebius's lifecycle: `Stop` leaves a RUNNING instance STOPPING for `settle_polls`
`Get` calls, then STOPPED; `Start` STARTING, then RUNNING. Every call is kept with the bearer token
it carried, so tests can assert what was asked and with which credentials.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc  # type: ignore[import-untyped,unused-ignore]
from nebius.api.google.rpc import Status
from nebius.api.nebius.billing.v1alpha1 import (
    ListSpotPricesRequest,
    ListSpotPricesResponse,
    SpotPrice,
    SpotPriceComputeInstance,
    SpotPriceValue,
)
from nebius.api.nebius.common.v1 import Operation
from nebius.api.nebius.compute.v1 import (
    GetInstanceRequest,
    Instance,
    InstanceStatus,
    IPAddressStatus,
    NetworkInterfaceStatus,
    PublicIPAddressStatus,
    StartInstanceRequest,
    StopInstanceRequest,
)
from nebius.base.options import INSECURE
from nebius.base.resolver import Prefix
from nebius.sdk import SDK

TOKEN = "nebius-test-token"
State = InstanceStatus.InstanceState


@dataclass
class FakeInstance:
    id: str
    state: Any = State.RUNNING
    settle_polls: int = 1
    pending: Any = None  # the state it reaches after settle_polls Gets
    public_ip: str = "198.51.100.9/32"
    private_ip: str = "10.1.0.4/32"


class FakeNebius:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.instances: dict[str, FakeInstance] = {}
        self.calls: list[tuple[str, str, str]] = []  # (method, instance id, authorization)
        self.spot_prices: list[SpotPrice] = []
        self.fail_stop: str | None = None
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        compute = {
            "Get": grpc.unary_unary_rpc_method_handler(self._get),
            "Stop": grpc.unary_unary_rpc_method_handler(self._stop),
            "Start": grpc.unary_unary_rpc_method_handler(self._start),
        }
        prices = {"List": grpc.unary_unary_rpc_method_handler(self._prices)}
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler("nebius.compute.v1.InstanceService", compute),
                grpc.method_handlers_generic_handler("nebius.billing.v1alpha1.SpotPriceService", prices),
            ]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def sdk(self, token: str = TOKEN) -> SDK:
        """An SDK client that reaches this fake (plaintext, every Nebius service at this address)."""
        return SDK(
            credentials=token,
            resolver=Prefix("nebius.", self.address),
            address_options={self.address: [(INSECURE, True)]},
            user_agent_prefix="spot-eval-test/1",
        )

    def close(self) -> None:
        self.server.stop(0)

    def add(self, instance_id: str, state: Any = State.RUNNING, settle_polls: int = 1) -> FakeInstance:
        instance = FakeInstance(instance_id, state, settle_polls)
        self.instances[instance_id] = instance
        return instance

    def methods(self) -> list[str]:
        with self.lock:
            return [m for m, _, _ in self.calls]

    def add_spot_price(self, region: str, platform: str, value: str, unit: str = "1 GPU-hour") -> None:
        self.spot_prices.append(
            SpotPrice(
                sku_id=f"sku-{platform}-{region}",
                product_title=f"{platform} preemptible",
                region=region,
                compute_instance=SpotPriceComputeInstance(platform=platform),
                price=SpotPriceValue(value=value, currency="USD", unit_title=unit),
            )
        )

    # --- handlers -------------------------------------------------------------------------------

    def _record(self, method: str, instance_id: str, context: Any) -> None:
        auth = dict(context.invocation_metadata()).get("authorization", "")
        with self.lock:
            self.calls.append((method, instance_id, auth))

    def _lookup(self, instance_id: str, context: Any) -> FakeInstance:
        instance = self.instances.get(instance_id)
        if instance is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"instance {instance_id} not found")
        assert instance is not None
        return instance

    def _get(self, payload: bytes, context: Any) -> bytes:
        request = GetInstanceRequest.FromString(payload)
        self._record("Get", request.id, context)
        with self.lock:
            instance = self._lookup(request.id, context)
            answer = Instance()
            answer.metadata.id = instance.id
            interface = NetworkInterfaceStatus(
                name="eth0",
                ip_address=IPAddressStatus(address=instance.private_ip),
                public_ip_address=PublicIPAddressStatus(address=instance.public_ip),
            )
            answer.status = InstanceStatus(state=instance.state, network_interfaces=[interface])
            if instance.pending is not None:
                instance.settle_polls -= 1
                if instance.settle_polls <= 0:
                    instance.state, instance.pending = instance.pending, None
        return bytes(answer.SerializeToString())

    def _operation(self, instance_id: str, ok: bool = True, message: str = "") -> bytes:
        status = Status(code=0) if ok else Status(code=9, message=message)
        return bytes(
            Operation(id=f"op-{instance_id}", resource_id=instance_id, status=status).SerializeToString()
        )

    def _stop(self, payload: bytes, context: Any) -> bytes:
        request = StopInstanceRequest.FromString(payload)
        self._record("Stop", request.id, context)
        with self.lock:
            if self.fail_stop:
                return self._operation(request.id, False, self.fail_stop)
            instance = self._lookup(request.id, context)
            instance.state, instance.pending, instance.settle_polls = State.STOPPING, State.STOPPED, 1
        return self._operation(request.id)

    def _start(self, payload: bytes, context: Any) -> bytes:
        request = StartInstanceRequest.FromString(payload)
        self._record("Start", request.id, context)
        with self.lock:
            instance = self._lookup(request.id, context)
            instance.state, instance.pending, instance.settle_polls = State.STARTING, State.RUNNING, 2
        return self._operation(request.id)

    def _prices(self, payload: bytes, context: Any) -> bytes:
        ListSpotPricesRequest.FromString(payload)
        self._record("ListSpotPrices", "", context)
        return bytes(ListSpotPricesResponse(items=list(self.spot_prices)).SerializeToString())


class FakeImds:
    """The VM's metadata service: `/v1/instance-data` and `/v1/iam/sa/token` (Metadata: true)."""

    def __init__(self, instance_id: str, token: str | None = TOKEN) -> None:
        self.instance_id, self.token = instance_id, token
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.requests.append(self.path)
                status, body = fake.answer(self.path, self.headers.get("Metadata"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, path: str, metadata: str | None) -> tuple[int, Any]:
        if metadata != "true":
            return 400, {"error": "Metadata: true header required"}
        if path == "/v1/instance-data":
            return 200, {"id": self.instance_id, "parent_id": "project-e00test", "name": "spot-eval-node"}
        if path == "/v1/iam/sa/token":
            if self.token is None:
                return 404, {"error": "no service account attached"}
            return 200, {"access_token": self.token, "expires_at": "2099-01-01T00:00:00Z"}
        return 404, {"error": path}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
