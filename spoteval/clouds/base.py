"""What every control plane shares: the `ControlPlane` protocol, node states, the stack's outputs,
the options common to all providers, waiting, and a JSON GET.

The stack's outputs (`StackOutputs`) are the same on every provider: `provider`, `region`, `zone`,
`node_ids`, `instance_type`, `market`, `bucket_url`, `run_id`, `server_port`, `address_kind`, as
`pulumi stack output --json` prints them.

`stop()` and `start()` block until the node has reached the state (or raise `ControlPlaneError`);
asking about state or price never starts or stops anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final, Protocol, TypeVar, cast

from spoteval.apis.http import json_object
from spoteval.price import Price
from spoteval.providers import BY_KEY as PROVIDER_KEYS
from spoteval.providers import PROVIDERS as PROVIDER_FACTS
from spoteval.record import MARKETS, Event

#: Normalised node states; each provider maps its own words onto these and keeps the original in `raw`.
STATUSES: Final = frozenset({"pending", "running", "stopping", "stopped", "terminated", "unknown"})
#: `address_kind` values with a meaning here; any other reads as `public` (the node's reachable address).
PRIVATE_ADDRESS_KINDS: Final = frozenset({"private", "internal", "pod"})
T = TypeVar("T")
OUTPUT_KEYS: Final = (
    "provider",
    "region",
    "zone",
    "node_ids",
    "instance_type",
    "market",
    "bucket_url",
    "run_id",
    "server_port",
    "address_kind",
)


class ControlPlaneError(Exception):
    """The provider refused or failed an operation; the message names the node and the operation."""


class CapacityError(ControlPlaneError):
    """The provider has no capacity (or quota) for the node now: worth trying again later.

    The message carries the provider's own words (its error code and message)."""


@dataclass(frozen=True)
class NodeState:
    """A node's state: `status` is one of STATUSES, `raw` is the provider's own word for it."""

    status: str
    raw: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown node status {self.status!r} (known: {', '.join(sorted(STATUSES))})")

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def stopped(self) -> bool:
        return self.status == "stopped"


@dataclass(frozen=True)
class StackOutputs:
    """The outputs every provider's stack exports (see the module docstring)."""

    provider: str
    region: str
    zone: str | None
    node_ids: tuple[str, ...]
    instance_type: str
    market: str
    bucket_url: str
    run_id: str
    server_port: int
    address_kind: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: object, where: str = "outputs") -> StackOutputs:
        """Parse `pulumi stack output --json`; raises ControlPlaneError naming the missing or bad key."""
        if not isinstance(raw, Mapping):
            raise ControlPlaneError(f"{where}: must be a JSON object, got {type(raw).__name__}")

        def text(key: str, *, optional: bool = False) -> str | None:
            value = raw.get(key)
            if value is None or value == "":
                if optional:
                    return None
                raise ControlPlaneError(f"{where}.{key}: missing")
            if not isinstance(value, str):
                raise ControlPlaneError(f"{where}.{key}: must be a string, got {value!r}")
            return value

        provider = text("provider")
        assert provider is not None
        known = {*PROVIDER_FACTS, *PROVIDER_KEYS}
        if provider not in known:
            raise ControlPlaneError(
                f"{where}.provider: unknown provider {provider!r} (known: {', '.join(sorted(known))})"
            )
        nodes = raw.get("node_ids")
        if isinstance(nodes, str):
            nodes = [nodes]
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) and n for n in nodes):
            raise ControlPlaneError(f"{where}.node_ids: must be a non-empty list of node ids, got {nodes!r}")
        market = text("market")
        if market not in MARKETS:
            raise ControlPlaneError(f"{where}.market: {market!r} is not one of {', '.join(sorted(MARKETS))}")
        port = raw.get("server_port")
        if isinstance(port, str) and port.isdigit():
            port = int(port)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ControlPlaneError(f"{where}.server_port: must be a TCP port, got {port!r}")
        kind = text("address_kind", optional=True) or "public"
        region, instance_type = text("region"), text("instance_type")
        bucket_url, run_id = text("bucket_url"), text("run_id")
        assert region and instance_type and bucket_url and run_id and market and kind
        return cls(
            provider=provider,
            region=region,
            zone=text("zone", optional=True),
            node_ids=tuple(nodes),
            instance_type=instance_type,
            market=market,
            bucket_url=bucket_url,
            run_id=run_id,
            server_port=port,
            address_kind=kind,
            extra={k: v for k, v in raw.items() if k not in OUTPUT_KEYS},
        )

    def event(
        self,
        time: datetime,
        node: str,
        kind: str,
        reason: str | None,
        *,
        price: Price | None,
        details: Mapping[str, Any],
    ) -> Event:
        """An event of the run record for `node` of this stack, at the price read for it (the start
        and stop events the measurement and the operator write)."""
        return Event(
            time=time,
            run_id=self.run_id,
            node=node,
            kind=kind,
            reason=reason,
            provider=self.provider,
            region=self.region,
            zone=self.zone,
            instance_type=self.instance_type,
            market=self.market,
            price_per_hour=price.per_hour if price else None,
            currency=price.currency if price else None,
            price_source=price.source if price else "unknown",
            details=details,
        )


@dataclass(frozen=True)
class PlaneOptions:
    """What a control plane needs beyond the stack's outputs.

    Common to every provider: `configured_price` (used when the provider has no price API, or none
    is configured), its `currency`, and `poll_s`, the interval between state reads while waiting.
    `providers` maps a provider name to that provider's own options (the keys of the stack config's
    block for it, as `gcp: {project: ...}`); the provider's module parses them
    (`AwsOptions`, `GcpOptions`, ... beside each plane) and rejects keys it does not know.
    """

    configured_price: float | None = None
    currency: str = "USD"
    poll_s: float = 5.0
    providers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def own(self, *names: str) -> Mapping[str, Any]:
        """The options given for the provider under any of its names, `None` values left out."""
        merged: dict[str, Any] = {}
        for name in names:
            merged.update((k, v) for k, v in self.providers.get(name, {}).items() if v is not None)
        return merged


def option_text(raw: Mapping[str, Any], key: str, provider: str) -> str | None:
    """A provider option that must be a non-empty string when given."""
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ControlPlaneError(f"{provider} option {key}: must be a string, got {value!r}")
    return value


def provider_options(cls: type[T], options: PlaneOptions, *names: str) -> T:
    """A provider's own options (a frozen dataclass of optional strings) from its block under any of
    its `names`; ControlPlaneError naming a key it does not take or a value that is not a string."""
    raw = options.own(*names)
    keys = [f.name for f in fields(cast(Any, cls))]
    check_option_keys(raw, keys, names[0])
    return cls(**{key: option_text(raw, key, names[0]) for key in keys})


def check_option_keys(raw: Mapping[str, Any], known: Collection[str], provider: str) -> None:
    """One clear line for an option the provider's plane does not take."""
    unknown = sorted(k for k in raw if k not in known)
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise ControlPlaneError(f"{provider} options: unknown key {unknown[0]!r} (known: {takes})")


class ControlPlane(Protocol):
    """One node's control plane. Every method names the node in its errors."""

    provider: str
    node: str
    #: True when the provider itself brings the node back after a preemption (AWS persistent
    #: requests, Kubernetes controllers); `start()` then waits for it instead of asking.
    restarts_itself: bool
    #: False when a stopped node cannot stay stopped (a Kubernetes controller replaces the pod).
    can_stay_stopped: bool

    def price_now(self) -> Price: ...

    def state(self) -> NodeState: ...

    def stop(self, timeout_s: float) -> None: ...

    def start(self, timeout_s: float) -> None: ...

    def address(self) -> str | None: ...

    def simulate_preemption(self, timeout_s: float) -> str:
        """Make the provider take the node as a preemption would; returns how (for the record)."""
        ...


def configured_price(options: PlaneOptions, **details: Any) -> Price:
    """The configured price, or an unknown one when none is configured."""
    if options.configured_price is None:
        return Price(None, options.currency, "unknown", details)
    return Price(options.configured_price, options.currency, "configured", details)


HttpGet = Callable[[str], Mapping[str, Any]]


def http_get_json(url: str) -> Mapping[str, Any]:
    """GET a JSON object; errors name the URL without its query (which may carry an API key)."""
    return json_object(url, ControlPlaneError, label="GET ", timeout=30)


def wait_for(
    read: Callable[[], NodeState],
    want: Collection[str],
    *,
    timeout_s: float,
    poll_s: float,
    what: str,
    fatal: Collection[str] = ("terminated",),
) -> NodeState:
    """Poll `read()` until its status is in `want`; ControlPlaneError on timeout or a fatal status."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = read()
        if state.status in want:
            return state
        if state.status in fatal:
            raise ControlPlaneError(f"{what}: the node is {state.raw} ({state.status})")
        if time.monotonic() >= deadline:
            raise ControlPlaneError(
                f"{what}: still {state.raw} after {timeout_s:g} s (waiting for {'/'.join(sorted(want))})"
            )
        time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
