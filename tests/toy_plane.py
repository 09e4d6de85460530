"""The toy eighth provider's control plane (tests/toy_provider.py): one node that stops and starts
on request. tests/test_provider_registry.py copies it into spoteval/clouds/."""

from __future__ import annotations

from spoteval.clouds.base import NodeState, PlaneOptions, StackOutputs, configured_price
from spoteval.price import Price


class ToyPlane:
    provider = "toy"
    restarts_itself = False
    can_stay_stopped = True

    def __init__(self, node: str, options: PlaneOptions) -> None:
        self.node = node
        self.options = options
        self.status = "running"

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> ToyPlane:
        return cls(node, config)

    def price_now(self) -> Price:
        return configured_price(self.options)

    def state(self) -> NodeState:
        return NodeState(self.status, self.status)

    def stop(self, timeout_s: float) -> None:
        self.status = "stopped"

    def start(self, timeout_s: float) -> None:
        self.status = "running"

    def address(self) -> str | None:
        return None

    def simulate_preemption(self, timeout_s: float) -> str:
        self.status = "stopped"
        return "stopped by the toy API"
