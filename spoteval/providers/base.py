"""The types every provider's fact module fills in: the facts themselves (`ProviderFacts`, its
`Metadata` and `PriceApi`), the pool engine and pool scaling, the event history, instance shapes,
Kubernetes flavours, and the named "none" each capability takes where a provider lacks it.

Each fact has a `Source` (the documentation page it was checked against and the date). Providers
change these over time: recheck the page before relying on a fact, and update the date with it.
Standard library only: this package ships in the node's agent bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

#: the date every fact below was last checked against its source
CHECKED: Final = "2026-12-01"

#: seconds kept between the end of the agent's stop window and the provider's hard stop, so the
#: agent's own SIGTERM handling finishes inside the notice (a project choice, not a provider fact)
STOP_MARGIN_S: Final = 5


@dataclass(frozen=True)
class Source:
    """Where a fact was checked, and when."""

    url: str
    checked: str = CHECKED
    note: str = ""


@dataclass(frozen=True)
class Metadata:
    """The instance metadata service as seen from the node."""

    base_url: str
    #: headers every read must carry (the service refuses requests without them)
    headers: Mapping[str, str]
    #: named paths under `base_url` (query strings included where the service needs a version)
    paths: Mapping[str, str]
    #: seconds between the agent's notice polls (a long poll's timeout on GCP); None: no notice here
    poll_s: float | None = None
    #: IMDSv2 session tokens (AWS): the header that asks for one (with its TTL) and the one that sends it
    token_ttl_header: str | None = None
    token_header: str | None = None
    #: longest token lifetime the service grants, in seconds
    token_ttl_max_s: int | None = None
    #: event types that take the VM (Azure Scheduled Events)
    stopping_events: frozenset[str] = frozenset()
    #: seconds between a host-maintenance notice and the maintenance (GCP `maintenance-event`)
    maintenance_notice_s: int | None = None

    def url(self, name: str) -> str:
        return self.base_url + self.paths[name]


@dataclass(frozen=True)
class PriceApi:
    """Where the price in force is read."""

    #: the endpoint (a format string with `{region}` where the endpoint is regional); None: SDK only
    url: str | None
    #: API version the code speaks
    version: str | None
    #: what a caller needs: "none", "instance role", "API key", "account credentials"
    auth: str
    #: markets on which the node reads its own price with the standard library (else configured)
    node_markets: frozenset[str] = frozenset()
    #: further names the query needs (GCP: the Compute Engine service of the billing catalog)
    names: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderFacts:
    """One provider's facts. Every field after `title` is a fact with an entry in `sources`."""

    name: str  # "aws", "gcp", "azure", "kubernetes", "nebius", "runpod"
    #: the provider's key in stack config, stack outputs and the agent's config ("k8s" for kubernetes)
    key: str
    title: str
    #: seconds of notice before the capacity is taken back (None: per Kubernetes flavour)
    notice_s: int | None
    #: how the notice reaches the node
    notice_via: str
    #: seconds from SIGTERM to SIGKILL the agent assumes (conservative)
    sigterm_grace_s: float
    metadata: Metadata | None
    price: PriceApi | None
    #: other endpoints of the provider's API the code calls
    api_urls: Mapping[str, str]
    #: the bill runs from the node's boot (VMs), not from when the workload starts
    billed_from_boot: bool
    #: the provider brings a node back by itself after a preemption (AWS persistent requests,
    #: Kubernetes controllers)
    restarts_itself: bool
    #: a stopped node stays stopped (False: a controller replaces it at once)
    can_stay_stopped: bool
    #: what happens after a reclaim, and how the node comes back
    restart: str
    #: what happens to the node's address across stop and start
    address: str
    #: the address kind a single node gets when the stack does not say ("ephemeral" | "static")
    default_address: str
    #: the spot market takes a price bid the stack declares (in USD)
    takes_bid: bool
    #: markets a stack may declare
    markets: tuple[str, ...]
    #: why powering off from inside the OS does not stop this node (None: it does)
    os_poweroff: str | None
    #: powering off from inside the OS stops the node but leaves it billed (None: it does not)
    os_poweroff_billed: str | None
    #: the node is stopped through the provider's API from inside (`on_done: api_stop`)
    api_stop: bool
    sources: Mapping[str, Source]

    def source(self, fact: str) -> Source:
        return self.sources[fact]

    def market_refusal(self, market: str) -> str:
        """Why a stack cannot declare `market` here, in one line with the source and its date."""
        s = self.sources["markets"]
        why = f"{s.note}; {s.url}, checked {s.checked}"
        use = " or ".join(self.markets)
        return f"{self.name} offers no {market} capacity through its API ({why}): use {use}"

    @property
    def stop_timeout_s(self) -> int:
        """Seconds the agent's service gets between SIGTERM and SIGKILL: inside the notice."""
        if self.notice_s is None:
            raise ValueError(f"{self.name}: the notice depends on the Kubernetes flavour")
        return max(STOP_MARGIN_S, self.notice_s - STOP_MARGIN_S)


#: the fields of ProviderFacts that are facts (each needs a source)
FACT_FIELDS: Final = tuple(
    f.name for f in fields(ProviderFacts) if f.name not in ("name", "key", "title", "sources")
)


def cited(*groups: tuple[str | Source, str]) -> dict[str, Source]:
    """Sources by fact: each group is (a page or a Source, the names of the facts checked there)."""
    return {
        fact: page if isinstance(page, Source) else Source(page)
        for page, facts in groups
        for fact in facts.split()
    }


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str | None
    effect: str


@dataclass(frozen=True)
class K8sFlavour:
    """How pods land on spot (or on-demand) nodes of one managed Kubernetes flavour."""

    notice_s: int  # what a pod gets between SIGTERM and SIGKILL when its spot node goes away
    spot_selector: Mapping[str, str]
    spot_tolerations: tuple[Toleration, ...]
    on_demand_selector: Mapping[str, str]
    #: node labels that must be absent on on-demand nodes (node affinity DoesNotExist)
    on_demand_absent: tuple[str, ...]
    #: label naming the GPU model, when the flavour has one
    gpu_label: str | None
    source: Source = Source(
        "https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination"
    )

    @property
    def grace_s(self) -> int:
        return max(STOP_MARGIN_S, self.notice_s - STOP_MARGIN_S)


@dataclass(frozen=True)
class Lacks:
    """The named "none" of a capability a provider does not have, with why and where that is read."""

    capability: str
    why: str
    source: Source


@dataclass(frozen=True)
class PlaneOption:
    """An option of the provider's control plane that one of its actions needs."""

    name: str
    source: Source


@dataclass(frozen=True)
class AgentMetric:
    """A metric the agent publishes for a provider-side stop rule to watch."""

    #: the endpoint (a format string with `{region}`)
    url: str
    version: str
    #: the service name in the request signature
    service: str
    namespace: str
    metric: str
    #: the dimension naming the node (the alarm's EC2 action acts on the instance it names)
    dimension: str
    #: seconds between two datapoints (standard resolution: one datapoint a minute is stored)
    interval_s: float
    source: Source


@dataclass(frozen=True)
class PoolEngine:
    """A provider's group engine, which a pool stack declares and the operator drives as one node."""

    engine: str
    #: True when the engine itself brings back the members the provider took
    restores_members: bool
    #: the members' states that count as serving, in the provider's words
    serving: frozenset[str]
    source: Source


@dataclass(frozen=True)
class PoolScale:
    """How the node that finds its pool's run done scales the pool to zero through its engine
    (spoteval/agent/scale_zero.py), and the one permission the stack gives the node for it
    (components/pool_stop.py)."""

    engine: str  # the agent config's `pool.scale_to_zero.engine`
    #: the call, a format string over the config's fields (`{region}`, `{name}`, ...)
    url: str
    method: str
    #: what the node's identity must be allowed, on its own group only
    permissions: tuple[str, ...]
    #: the node's credential for the call: a metadata path's name in the provider's facts, or a file
    credential: str
    source: Source
    api_version: str = ""
    #: the metadata path's name where the node reads what the stack cannot know (Azure: the subscription)
    identity: str = ""


@dataclass(frozen=True)
class EventHistory:
    """One provider's record of interruptions and state changes, as spot-eval reads it."""

    #: where the stack keeps the events ("" when the provider keeps none spot-eval can read)
    capture: str
    #: the API call the reader makes ("" when there is no reader)
    api: str
    #: the provider's names of an interruption (an EventBridge detail-type, an audit method, ...)
    interruptions: frozenset[str]
    #: the provider's names of a state change and the states that mean the node no longer runs
    state_change: str
    stopped_states: frozenset[str]
    #: how long the provider (or the stack's capture) keeps the events, in days (None: not documented)
    retention_days: float | None
    source: Source
    #: a second page for the event names, when they are documented apart from the API
    names_source: Source | None = None
    #: the API's address, where the reader calls it over HTTP ({...} fields filled by the reader)
    endpoint: str = ""


def no_event_history(source: Source) -> EventHistory:
    """The named "none" of the event history: the provider keeps no record spot-eval can read
    (`source` says where that was checked)."""
    return EventHistory("", "", frozenset(), "", frozenset(), None, source)


@dataclass(frozen=True)
class InstanceShape:
    """One instance type: its GPUs (count and model, as the provider's price API names the model),
    vCPUs and memory, with the page they were read from."""

    gpus: int
    gpu: str
    vcpus: int
    memory_gib: float
    source: str
    checked: str = CHECKED


@dataclass(frozen=True)
class Regions:
    """How the provider spells a region and a zone in the stack config (None: the stack names none)."""

    #: a regular expression a region must match
    region: str
    #: a regular expression the zone must match after the region's name ("" when zones are not
    #: spelled after the region: `zones` lists them instead)
    zone_suffix: str
    #: the zones, where they are the same few names in every region
    zones: tuple[str, ...]
    source: Source


def table_gpus(shapes: Mapping[str, InstanceShape], instance_type: str) -> int | None:
    """GPUs of an instance type from a provider's shape table; None when the table does not know it."""
    shape = shapes.get(instance_type)
    return None if shape is None else shape.gpus
