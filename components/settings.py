"""Stack settings: the `spot-eval:*` keys of a stack config, parsed into frozen dataclasses.

`parse(raw)` is pure: it takes the config as a mapping of key (without the `spot-eval:` namespace)
to value and returns `Settings`, or raises `SettingsError` naming the offending key
(`node.instance_type: ...`). Nothing is declared before this succeeds, so a region, instance type or
price outside the grant fails before any resource exists. `load()` reads the same keys from
`pulumi.Config`.

Keys (see Pulumi.yaml and stacks/*.yaml):

    provider   aws | gcp | azure | k8s | nebius | runpod
    region     provider region (Azure: location)
    zone       zone for the node and its disks (optional on k8s)
    run_id     lowercase letters, digits and dashes; names the run record and the resources
    node       {instance_type, gpu_type, gpu_count, market, count, image, root_disk_gb, cache_disk_gb,
                max_price, address, ingress_cidrs}
    server     {command, model, port, health_path, ready_timeout_s, image (k8s)}
    eval       {command | harness and its keys (components/eval_settings.py), manifest, concurrency, ...}
    grant      see spoteval/grant.py
    stop       {max_runtime_hours, idle_minutes, on_done, notify_emails}
    workload   the placement's workload block (spoteval/placement)
    aws | gcp | azure | k8s | nebius | runpod   the provider's own block, parsed by the provider's
               module (components/registry.py names it): `parse_settings(reader)` there

How a provider names regions, zones and images (and what else it asks of the common keys) is its
module's `COMMON_RULES`; what a provider does (bids, markets, power-off, addresses) comes from
spoteval/providers.py.
`node.market` alone flips the same stack between spot and on-demand capacity.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast, runtime_checkable

from components.eval_settings import EVAL_KEYS, EvalProject, HarnessEval, parse_harness, parse_project
from components.registry import provider_module

# re-exported: every provider module and the tests import them from here
from components.setting_errors import SettingsError as SettingsError  # noqa: PLC0414
from components.setting_errors import SettingsReader as SettingsReader  # noqa: PLC0414
from components.setting_errors import reader as reader  # noqa: PLC0414
from components.stop_settings import ON_DONE as ON_DONE  # noqa: PLC0414
from components.stop_settings import STOP_KEYS, parse_stop
from components.stop_settings import StopSettings as StopSettings  # noqa: PLC0414
from components.workflows import node_refusal
from components.workload_settings import parse_workload_block
from spoteval.grant import Grant, GrantError
from spoteval.providers import BY_KEY, KEYS
from spoteval.stack import market_refusal

if TYPE_CHECKING:
    from spoteval.placement import Workload

NAMESPACE: Final = "spot-eval"
#: provider keys, as stack config spells them
PROVIDERS: Final = KEYS
MARKETS: Final = ("spot", "on_demand")

TOP_KEYS: Final = (
    "provider",
    "region",
    "zone",
    "run_id",
    "node",
    "server",
    "eval",
    "grant",
    "stop",
    "workload",
    *PROVIDERS,
)
#: keys that hold a mapping (JSON objects in the engine's config)
OBJECT_KEYS: Final = frozenset({"node", "server", "eval", "grant", "stop", "workload", *PROVIDERS})
REQUIRED_KEYS: Final = ("provider", "region", "run_id", "node", "server", "eval", "grant")

NODE_KEYS: Final = frozenset(
    {
        "instance_type",
        "gpu_type",
        "gpu_count",
        "market",
        "count",
        "image",
        "root_disk_gb",
        "cache_disk_gb",
        "max_price",
        "address",
        "ingress_cidrs",
    }
)
SERVER_KEYS: Final = frozenset({"command", "model", "port", "health_path", "ready_timeout_s", "image"})

ADDRESS_KINDS: Final = ("ephemeral", "static")
#: providers whose spot capacity takes a price bid that the stack declares (AWS max price, Azure
#: billing profile); bids are in USD.
BIDDING_PROVIDERS: Final = frozenset(p.key for p in BY_KEY.values() if p.takes_bid)

_RUN_ID = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
#: a bucket URL a provider block may name (Kubernetes, Runpod)
BUCKET_URL: Final = re.compile(r"^(s3|gs|az)://[a-z0-9][a-z0-9.\-_]{1,62}(/[^\s]*)?$")


def cidr(value: str, key: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise SettingsError(key, f"must be a CIDR block, got {value!r} ({exc})") from None


@dataclass(frozen=True)
class CommonKeyRules:
    """How a provider constrains the keys every stack has; its module's `COMMON_RULES`.

    `zone` and `image` return the problem with a value (None: fine); `zone_required` names why a
    stack must give a zone; `static_address` why a single node's address is always static;
    `server_image` that the model server runs from `server.image` (Kubernetes); `budget_alerts` that
    the stack's budget alert mails `stop.notify_emails`; `pools` that node.count > 1 is a pool.
    """

    region: re.Pattern[str] | None = None
    zone: Callable[[str, str], str | None] | None = None
    zone_required: bool = False
    image: Callable[[str], str | None] | None = None
    static_address: str | None = None
    server_image: bool = False
    budget_alerts: bool = False
    pools: bool = True


class ProviderSettings(Protocol):
    """What a provider's module offers the settings: its rules for the common keys and the parse of
    its own block."""

    COMMON_RULES: CommonKeyRules

    def parse_settings(self, block: SettingsReader) -> object: ...


@runtime_checkable
class NoticeOfBlock(Protocol):
    """A provider block that decides the notice (Kubernetes: the flavour's)."""

    @property
    def notice_s(self) -> int: ...


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSettings:
    instance_type: str
    gpu_type: str
    gpu_count: int
    market: str  # spot | on_demand
    count: int  # 0: no compute, 1: one node, > 1: a pool
    image: str
    root_disk_gb: int
    cache_disk_gb: int
    max_price: float | None  # the bid on spot markets that have one: node.max_price, else the grant's cap
    address: str  # ephemeral | static (single VM); pools are always ephemeral
    ingress_cidrs: tuple[str, ...]
    pool_instance_types: tuple[str, ...]  # instance types a pool may use: the grant's list, else ours

    @property
    def spot(self) -> bool:
        return self.market == "spot"

    @property
    def pool(self) -> bool:
        return self.count > 1


@dataclass(frozen=True)
class ServerSettings:
    command: tuple[str, ...]  # `{model}`, `{port}` and `{cache_dir}` are filled in on the node
    model: str
    port: int
    health_path: str
    ready_timeout_s: int
    image: str | None  # k8s: the model server's container image


@dataclass(frozen=True)
class EvalSettings:
    command: tuple[str, ...]  # the agent fills `{episode_id}`, `{model_url}`, `{output}`; () with harness
    manifest: str | None  # project-relative path of the manifest JSONL the node registers for the run
    concurrency: int
    max_attempts: int
    timeout_s: int
    heartbeat_s: int
    harness: HarnessEval | None = None  # components/eval_settings.py, instead of `command`
    project: EvalProject = field(default_factory=EvalProject)  # the eval project (eval_settings.py)


B = TypeVar("B")


@dataclass(frozen=True)
class Settings:
    stack: str
    provider: str
    region: str
    zone: str | None
    run_id: str
    node: NodeSettings
    server: ServerSettings
    eval: EvalSettings
    grant: Grant
    stop: StopSettings
    workload: Workload | None
    #: the provider's own block (`aws:`, `gcp:`, ...), as its module parsed it
    block: object = None

    def block_of(self, kind: type[B]) -> B:
        """The provider's own block, as the provider's module's type (`AwsSettings`, ...)."""
        if not isinstance(self.block, kind):
            raise TypeError(f"a {self.provider} stack has no {kind.__name__}")
        return self.block

    @property
    def notice_s(self) -> int:
        """Seconds of notice this stack's node gets: the provider's, or its block's (Kubernetes flavour)."""
        notice = BY_KEY[self.provider].notice_s
        if notice is not None:
            return notice
        if isinstance(self.block, NoticeOfBlock):
            return self.block.notice_s
        raise ValueError(f"a {self.provider} stack names no notice")

    @property
    def is_vm(self) -> bool:
        return self.provider != "k8s"

    @property
    def address_kind(self) -> str:
        """`static` when the node keeps its address across stop/start, else `ephemeral`."""
        if self.provider == "k8s":
            return "static"  # the Service's cluster address outlives the pods behind it
        if self.node.pool:
            return "ephemeral"
        return self.node.address

    @property
    def configured_price(self) -> float | None:
        """The workload's price per node-hour for the market in force, if it states one."""
        return None if self.workload is None else self.workload.prices.of(self.node.market)

    @property
    def tags(self) -> dict[str, str]:
        return {"spot-eval-run": self.run_id, "spot-eval-stack": self.stack}


def _grant_error(exc: GrantError) -> SettingsError:
    return SettingsError(exc.key, str(exc)[len(exc.key) + 2 :])


# --- blocks --------------------------------------------------------------------------------------


def _region(provider: str, rules: CommonKeyRules, region: str) -> str:
    if rules.region is not None and not rules.region.match(region):
        raise SettingsError("region", f"{region!r} is not a {provider} region name")
    return region


def _zone(provider: str, rules: CommonKeyRules, region: str, raw: object) -> str | None:
    if raw is None or raw == "":
        if rules.zone_required:
            raise SettingsError("zone", f"is required on {provider} (the node's disks live in one zone)")
        return None
    if not isinstance(raw, str):
        raise SettingsError("zone", f"must be a string, got {raw!r}")
    problem = rules.zone(region, raw) if rules.zone is not None else None
    if problem is not None:
        raise SettingsError("zone", problem)
    return raw


def _node(block: SettingsReader, provider: str, rules: CommonKeyRules, grant: Grant) -> NodeSettings:
    facts = BY_KEY[provider]
    instance_type = block.string("instance_type")
    try:
        grant.check_instance_type(instance_type, key="node.instance_type")
    except GrantError as exc:
        raise _grant_error(exc) from None
    market = block.choice("market", MARKETS, "spot" if "spot" in facts.markets else facts.markets[0])
    refusal = market_refusal(provider, market)
    if refusal is not None:
        raise SettingsError("node.market", refusal)
    count = block.integer("count", 1, minimum=0)
    image = block.string("image")
    problem = rules.image(image) if rules.image is not None else None
    if problem is not None:
        raise SettingsError("node.image", problem)
    max_price = block.opt_number("max_price", positive=True)
    if max_price is not None and not facts.takes_bid:
        raise SettingsError(
            "node.max_price",
            f"{provider} takes no bid here (bids: {', '.join(sorted(BIDDING_PROVIDERS))}); "
            "the grant's price_cap is enforced by the agent and before every start",
        )
    if max_price is not None:
        try:
            grant.check_max_price(max_price, key="node.max_price")
        except GrantError as exc:
            raise _grant_error(exc) from None
    static = rules.static_address
    address = block.choice("address", ADDRESS_KINDS, "static" if static else "ephemeral")
    if static and address != "static" and count == 1:
        raise SettingsError("node.address", f"{static}; use static")
    refused = node_refusal(provider, count, address, block.has("address"))
    if refused is not None:
        raise SettingsError(*refused)
    ingress = tuple(cidr(c, "node.ingress_cidrs") for c in block.strings("ingress_cidrs"))
    pool_types = grant.instance_types or (instance_type,)
    if instance_type in pool_types:
        pool_types = (instance_type, *(t for t in pool_types if t != instance_type))
    return NodeSettings(
        instance_type=instance_type,
        gpu_type=block.string("gpu_type"),
        gpu_count=block.integer("gpu_count", 1),
        market=market,
        count=count,
        image=image,
        root_disk_gb=block.integer("root_disk_gb", 100, minimum=20),
        cache_disk_gb=block.integer("cache_disk_gb", 200, minimum=10),
        max_price=(max_price if max_price is not None else grant.price_cap) if market == "spot" else None,
        address=address,
        ingress_cidrs=ingress,
        pool_instance_types=pool_types,
    )


def _server(block: SettingsReader, provider: str, rules: CommonKeyRules) -> ServerSettings:
    health = block.string("health_path", "/health")
    if not health.startswith("/"):
        raise SettingsError("server.health_path", f"must start with /, got {health!r}")
    port = block.integer("port", 8000)
    if port > 65535:
        raise SettingsError("server.port", f"must be <= 65535, got {port}")
    image = block.opt_string("image")
    if rules.server_image and image is None:
        raise SettingsError("server.image", f"is required on {provider} (the model server's container image)")
    if not rules.server_image and image is not None:
        raise SettingsError("server.image", "is only used on k8s; on a VM, start the image in server.command")
    return ServerSettings(
        command=block.argv("command"),
        model=block.string("model"),
        port=port,
        health_path=health,
        ready_timeout_s=block.integer("ready_timeout_s", 1800),
        image=image,
    )


def _eval(block: SettingsReader) -> EvalSettings:
    harness = parse_harness(block)
    manifest = block.opt_string("manifest")
    if manifest is not None and (Path(manifest).is_absolute() or ".." in Path(manifest).parts):
        raise SettingsError("eval.manifest", f"must be a path inside the project, got {manifest!r}")
    return EvalSettings(
        command=() if harness else block.argv("command"),
        manifest=manifest,
        concurrency=block.integer("concurrency", 8),
        max_attempts=block.integer("max_attempts", 3),
        timeout_s=block.integer("timeout_s", 3600),
        heartbeat_s=block.integer("heartbeat_s", 30),
        harness=harness,
        project=parse_project(block),
    )


# --- entry points --------------------------------------------------------------------------------


def parse(raw: Mapping[str, Any], stack: str = "stack") -> Settings:
    """Parse the `spot-eval:*` config (keys without the namespace) into `Settings`."""
    top = reader(raw, "")
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise SettingsError(unknown[0], f"unknown key (known: {', '.join(TOP_KEYS)})")
    for key in REQUIRED_KEYS:
        if raw.get(key) in (None, ""):
            raise SettingsError(key, "is required")
    for key in sorted(OBJECT_KEYS):
        if top.has(key):
            reader(raw[key], key)

    provider = raw["provider"]
    if provider not in PROVIDERS:
        raise SettingsError("provider", f"must be one of {', '.join(PROVIDERS)}, got {provider!r}")
    module = cast(ProviderSettings, provider_module(provider))
    rules = module.COMMON_RULES
    try:
        grant = Grant.parse(raw["grant"], where="grant")
    except GrantError as exc:
        raise _grant_error(exc) from None

    region = raw["region"]
    if not isinstance(region, str):
        raise SettingsError("region", f"must be a string, got {region!r}")
    _region(provider, rules, region)
    try:
        grant.check_region(region, key="region")
    except GrantError as exc:
        raise _grant_error(exc) from None
    zone = _zone(provider, rules, region, raw.get("zone"))

    run_id = raw["run_id"]
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise SettingsError(
            "run_id",
            f"must be 2-32 lowercase letters, digits and dashes starting with a letter, got {run_id!r}",
        )

    node = _node(reader(raw["node"], "node", NODE_KEYS), provider, rules, grant)
    if node.max_price is not None and provider in BIDDING_PROVIDERS and grant.currency != "USD":
        raise SettingsError(
            "grant.currency",
            f"the {provider} bid (node.max_price, else grant.price_cap) is in USD, got {grant.currency!r}",
        )
    if node.pool and not rules.pools:
        raise SettingsError("node.count", f"{provider} stacks declare one node (0 or 1), got {node.count}")
    server = _server(reader(raw["server"], "server", SERVER_KEYS), provider, rules)
    ev = _eval(reader(raw["eval"], "eval", EVAL_KEYS))
    stop = parse_stop(reader(raw.get("stop") or {}, "stop", STOP_KEYS), provider, rules.budget_alerts, grant)

    block: object = None
    for name in PROVIDERS:
        if name != provider:
            if raw.get(name):
                raise SettingsError(name, f"is set, but this stack's provider is {provider}")
            continue
        block = module.parse_settings(reader(raw.get(name) or {}, name))

    workload_raw = raw.get("workload") or None
    workload = (
        parse_workload_block(
            workload_raw,
            provider=provider,
            market=node.market,
            gpu_count=node.gpu_count,
            concurrency=ev.concurrency,
            grant=grant,
        )
        if workload_raw is not None
        else None
    )

    return Settings(
        stack=stack,
        provider=provider,
        region=region,
        zone=zone,
        run_id=run_id,
        node=node,
        server=server,
        eval=ev,
        grant=grant,
        stop=stop,
        workload=workload,
        block=block,
    )


def raw_from_config(get: Mapping[str, str | None]) -> dict[str, Any]:
    """Decode config values as the engine hands them over (objects arrive as JSON text)."""
    raw: dict[str, Any] = {}
    for key in TOP_KEYS:
        value = get.get(key)
        if value is None:
            continue
        if key in OBJECT_KEYS:
            try:
                raw[key] = json.loads(value)
            except ValueError:
                raise SettingsError(key, f"must be a mapping, got {value!r}") from None
        else:
            raw[key] = value
    return raw


def load() -> Settings:
    """Read the stack's `spot-eval:*` config through pulumi.Config and parse it."""
    import pulumi

    config = pulumi.Config(NAMESPACE)
    return parse(raw_from_config({key: config.get(key) for key in TOP_KEYS}), stack=pulumi.get_stack())
