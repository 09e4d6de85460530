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
    eval       {command, manifest, concurrency, max_attempts, timeout_s, heartbeat_s}
    grant      see spoteval/grant.py
    stop       {max_runtime_hours, idle_minutes, on_done, notify_emails}
    workload   the placement's workload block (spoteval/placement.py)
    aws | gcp | azure | k8s | nebius | runpod   the provider's own block

`node.market` alone flips the same stack between spot and on-demand capacity.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from components.facts import K8S_FLAVOURS, MARKETS, PROVIDERS
from spoteval.grant import Grant, GrantError

if TYPE_CHECKING:
    from spoteval.placement import Workload

NAMESPACE: Final = "spot-eval"

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
OBJECT_KEYS: Final = frozenset(
    {"node", "server", "eval", "grant", "stop", "workload", "aws", "gcp", "azure", "k8s", "nebius", "runpod"}
)
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
EVAL_KEYS: Final = frozenset(
    {"command", "manifest", "concurrency", "max_attempts", "timeout_s", "heartbeat_s"}
)
STOP_KEYS: Final = frozenset({"max_runtime_hours", "idle_minutes", "on_done", "notify_emails"})
AWS_KEYS: Final = frozenset({"vpc_cidr"})
GCP_KEYS: Final = frozenset({"project", "billing_account", "subnet_cidr"})
AZURE_KEYS: Final = frozenset({"resource_group", "admin_username", "ssh_public_key", "vnet_cidr"})
K8S_KEYS: Final = frozenset(
    {
        "flavour",
        "namespace",
        "create_namespace",
        "bucket_url",
        "context",
        "storage_class",
        "service_account_annotations",
        "node_selector",
    }
)
NEBIUS_KEYS: Final = frozenset({"project_id", "tenant_id", "subnet_id"})
RUNPOD_KEYS: Final = frozenset({"bucket_url", "s3_endpoint", "s3_region", "cloud_type", "secrets"})
PROVIDER_BLOCK_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "aws": AWS_KEYS,
    "gcp": GCP_KEYS,
    "azure": AZURE_KEYS,
    "k8s": K8S_KEYS,
    "nebius": NEBIUS_KEYS,
    "runpod": RUNPOD_KEYS,
}

#: api_stop: the agent stops the node through the provider's API (Nebius, Runpod)
ON_DONE: Final = ("exit", "poweroff", "api_stop")
API_STOP_PROVIDERS: Final = ("nebius", "runpod")
ADDRESS_KINDS: Final = ("ephemeral", "static")

_RUN_ID = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_AZURE_RG = re.compile(r"^[-\w._()]{1,89}[-\w_()]$")
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d$")
_AZURE_REGION = re.compile(r"^[a-z]+[a-z0-9]*$")
_AMI = re.compile(r"^(ami-[0-9a-f]{8,17}|resolve:ssm:/[A-Za-z0-9_./-]+)$")
_BUCKET_URL = re.compile(r"^(s3|gs|az)://[a-z0-9][a-z0-9.\-_]{1,62}(/[^\s]*)?$")


class SettingsError(ValueError):
    """A stack setting that is missing, malformed or outside the grant. `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


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
    command: tuple[str, ...]  # the agent fills `{episode_id}`, `{model_url}`, `{output}`
    manifest: str | None  # project-relative path of the manifest JSONL the node registers for the run
    concurrency: int
    max_attempts: int
    timeout_s: int
    heartbeat_s: int


@dataclass(frozen=True)
class StopSettings:
    max_runtime_hours: float | None
    idle_minutes: float | None
    on_done: str  # exit | poweroff
    notify_emails: tuple[str, ...]

    @property
    def max_runtime_s(self) -> int | None:
        return None if self.max_runtime_hours is None else round(self.max_runtime_hours * 3600)

    @property
    def idle_s(self) -> int | None:
        return None if self.idle_minutes is None else round(self.idle_minutes * 60)


@dataclass(frozen=True)
class AwsSettings:
    vpc_cidr: str = "10.42.0.0/16"


@dataclass(frozen=True)
class GcpSettings:
    project: str
    billing_account: str | None = None
    subnet_cidr: str = "10.42.0.0/20"


@dataclass(frozen=True)
class AzureSettings:
    resource_group: str
    admin_username: str
    ssh_public_key: str
    vnet_cidr: str = "10.42.0.0/16"


@dataclass(frozen=True)
class K8sSettings:
    flavour: str
    namespace: str
    create_namespace: bool
    bucket_url: str
    context: str | None
    storage_class: str | None
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NebiusSettings:
    project_id: str
    tenant_id: str  # the node's service account joins a group there that the bucket policy names
    subnet_id: str


@dataclass(frozen=True)
class RunpodSettings:
    bucket_url: str  # s3:// bucket on a provider that has object storage (Runpod has none)
    s3_endpoint: str
    s3_region: str
    cloud_type: str  # SECURE | COMMUNITY
    #: names of Runpod secrets holding the bucket's S3 access key id and secret (never the values)
    secrets: Mapping[str, str] = field(default_factory=dict)


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
    aws: AwsSettings | None = None
    gcp: GcpSettings | None = None
    azure: AzureSettings | None = None
    k8s: K8sSettings | None = None
    nebius: NebiusSettings | None = None
    runpod: RunpodSettings | None = None

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


# --- small typed readers -------------------------------------------------------------------------


def _mapping(value: object, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingsError(key, f"must be a mapping, got {type(value).__name__}")
    return value


def _known(raw: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsError(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(known))})")


def _str(raw: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if value is None:
        raise SettingsError(f"{where}.{key}", "is required")
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _opt_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if raw.get(key) is None else _str(raw, key, where)


def _int(
    raw: Mapping[str, Any], key: str, where: str, default: int | None = None, *, minimum: int = 1
) -> int:
    value = raw.get(key, default)
    if value is None:
        raise SettingsError(f"{where}.{key}", "is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError(f"{where}.{key}", f"must be an integer, got {value!r}")
    if value < minimum:
        raise SettingsError(f"{where}.{key}", f"must be >= {minimum}, got {value}")
    return value


def _number(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SettingsError(f"{where}.{key}", f"must be a number, got {value!r}")
    if value <= 0:
        raise SettingsError(f"{where}.{key}", f"must be > 0, got {value!r}")
    return float(value)


def _bool(raw: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SettingsError(f"{where}.{key}", f"must be true or false, got {value!r}")
    return value


def _choice(raw: Mapping[str, Any], key: str, where: str, choices: Sequence[str], default: str | None) -> str:
    value = _str(raw, key, where, default)
    if value not in choices:
        raise SettingsError(f"{where}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _command(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        raise SettingsError(f"{where}.{key}", "is required")
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v for v in value):
        raise SettingsError(f"{where}.{key}", f"must be a non-empty list of strings (argv), got {value!r}")
    return tuple(value)


def _strings(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise SettingsError(f"{where}.{key}", f"must be a list of strings, got {value!r}")
    return tuple(value)


def _string_map(raw: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise SettingsError(f"{where}.{key}", f"must be a mapping of strings, got {value!r}")
    return dict(value)


def _cidr(value: str, key: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise SettingsError(key, f"must be a CIDR block, got {value!r} ({exc})") from None


def _grant_error(exc: GrantError) -> SettingsError:
    return SettingsError(exc.key, str(exc)[len(exc.key) + 2 :])


# --- blocks --------------------------------------------------------------------------------------


def _region(provider: str, region: str) -> str:
    pattern = {"aws": _AWS_REGION, "gcp": _GCP_REGION, "azure": _AZURE_REGION}.get(provider)
    if pattern is not None and not pattern.match(region):
        raise SettingsError("region", f"{region!r} is not a {provider} region name")
    return region


def _zone(provider: str, region: str, raw: object) -> str | None:
    if raw is None or raw == "":
        if provider in ("aws", "gcp"):
            raise SettingsError("zone", f"is required on {provider} (the node's disks live in one zone)")
        return None
    if not isinstance(raw, str):
        raise SettingsError("zone", f"must be a string, got {raw!r}")
    if provider == "aws" and not re.fullmatch(re.escape(region) + r"[a-z]", raw):
        raise SettingsError("zone", f"{raw!r} is not a zone of {region}")
    if provider == "gcp" and not re.fullmatch(re.escape(region) + r"-[a-z]", raw):
        raise SettingsError("zone", f"{raw!r} is not a zone of {region}")
    if provider == "azure" and raw not in ("1", "2", "3"):
        raise SettingsError("zone", f"must be an availability zone number 1, 2 or 3, got {raw!r}")
    return raw


#: providers whose spot capacity takes a price bid that the stack declares (AWS max price, Azure
#: billing profile, Runpod bid per GPU); bids are in USD.
BIDDING_PROVIDERS: Final = frozenset({"aws", "azure", "runpod"})


def _node(raw: Mapping[str, Any], provider: str, grant: Grant) -> NodeSettings:
    where = "node"
    _known(raw, NODE_KEYS, where)
    instance_type = _str(raw, "instance_type", where)
    try:
        grant.check_instance_type(instance_type, key="node.instance_type")
    except GrantError as exc:
        raise _grant_error(exc) from None
    market = _choice(raw, "market", where, MARKETS, "spot")
    if provider == "runpod" and market != "spot":
        raise SettingsError("node.market", "Runpod stacks declare interruptible pods only: use spot")
    count = _int(raw, "count", where, 1, minimum=0)
    image = _str(raw, "image", where)
    if provider == "aws" and not _AMI.match(image):
        raise SettingsError("node.image", f"must be an AMI id or resolve:ssm:/parameter, got {image!r}")
    if provider == "azure" and len(image.split(":")) != 4 and not image.startswith("/subscriptions/"):
        raise SettingsError(
            "node.image", f"must be publisher:offer:sku:version or an image id, got {image!r}"
        )
    max_price = _number(raw, "max_price", where)
    if max_price is not None and provider not in BIDDING_PROVIDERS:
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
    address = _choice(raw, "address", where, ADDRESS_KINDS, "static" if provider == "azure" else "ephemeral")
    if provider == "azure" and address != "static" and count == 1:
        raise SettingsError("node.address", "an Azure VM's Standard public IP is always static; use static")
    if count > 1 and address == "static" and "address" in raw and provider != "azure":
        raise SettingsError(
            "node.address", "a pool's nodes come and go; only single nodes get a static address"
        )
    ingress = tuple(_cidr(c, "node.ingress_cidrs") for c in _strings(raw, "ingress_cidrs", where))
    pool_types = grant.instance_types or (instance_type,)
    if instance_type in pool_types:
        pool_types = (instance_type, *(t for t in pool_types if t != instance_type))
    return NodeSettings(
        instance_type=instance_type,
        gpu_type=_str(raw, "gpu_type", where),
        gpu_count=_int(raw, "gpu_count", where, 1),
        market=market,
        count=count,
        image=image,
        root_disk_gb=_int(raw, "root_disk_gb", where, 100, minimum=20),
        cache_disk_gb=_int(raw, "cache_disk_gb", where, 200, minimum=10),
        max_price=(max_price if max_price is not None else grant.price_cap) if market == "spot" else None,
        address=address,
        ingress_cidrs=ingress,
        pool_instance_types=pool_types,
    )


def _server(raw: Mapping[str, Any], provider: str) -> ServerSettings:
    where = "server"
    _known(raw, SERVER_KEYS, where)
    health = _str(raw, "health_path", where, "/health")
    if not health.startswith("/"):
        raise SettingsError("server.health_path", f"must start with /, got {health!r}")
    port = _int(raw, "port", where, 8000)
    if port > 65535:
        raise SettingsError("server.port", f"must be <= 65535, got {port}")
    image = _opt_str(raw, "image", where)
    if provider == "k8s" and image is None:
        raise SettingsError("server.image", "is required on k8s (the model server's container image)")
    if provider != "k8s" and image is not None:
        raise SettingsError("server.image", "is only used on k8s; on a VM, start the image in server.command")
    return ServerSettings(
        command=_command(raw, "command", where),
        model=_str(raw, "model", where),
        port=port,
        health_path=health,
        ready_timeout_s=_int(raw, "ready_timeout_s", where, 1800),
        image=image,
    )


def _eval(raw: Mapping[str, Any]) -> EvalSettings:
    where = "eval"
    _known(raw, EVAL_KEYS, where)
    manifest = _opt_str(raw, "manifest", where)
    if manifest is not None and (Path(manifest).is_absolute() or ".." in Path(manifest).parts):
        raise SettingsError("eval.manifest", f"must be a path inside the project, got {manifest!r}")
    return EvalSettings(
        command=_command(raw, "command", where),
        manifest=manifest,
        concurrency=_int(raw, "concurrency", where, 8),
        max_attempts=_int(raw, "max_attempts", where, 3),
        timeout_s=_int(raw, "timeout_s", where, 3600),
        heartbeat_s=_int(raw, "heartbeat_s", where, 30),
    )


def _stop(raw: Mapping[str, Any], provider: str, grant: Grant) -> StopSettings:
    where = "stop"
    _known(raw, STOP_KEYS, where)
    max_runtime = _number(raw, "max_runtime_hours", where)
    if max_runtime is None:
        max_runtime = grant.max_runtime_hours
    elif grant.max_runtime_hours is not None and max_runtime > grant.max_runtime_hours:
        raise SettingsError(
            "stop.max_runtime_hours",
            f"{max_runtime} is above the grant's max_runtime_hours {grant.max_runtime_hours}",
        )
    idle = _number(raw, "idle_minutes", where)
    if idle is None:
        idle = grant.idle_minutes
    elif grant.idle_minutes is not None and idle > grant.idle_minutes:
        raise SettingsError(
            "stop.idle_minutes", f"{idle} is above the grant's idle_minutes {grant.idle_minutes}"
        )
    default_done = (
        "api_stop"
        if provider in API_STOP_PROVIDERS
        else "exit"
        if provider in ("azure", "k8s")
        else "poweroff"
    )
    on_done = _choice(raw, "on_done", where, ON_DONE, default_done)
    if (on_done == "api_stop") != (provider in API_STOP_PROVIDERS) and on_done != "exit":
        raise SettingsError(
            "stop.on_done",
            f"{on_done} does not stop a {provider} node; use "
            + (
                "api_stop (through the provider's API) or exit"
                if provider in API_STOP_PROVIDERS
                else "poweroff or exit"
            ),
        )
    if provider == "azure" and on_done == "poweroff":
        raise SettingsError(
            "stop.on_done",
            "poweroff from inside the OS leaves an Azure VM allocated and billed; use exit "
            "(and deallocate from outside)",
        )
    if provider == "k8s" and on_done == "poweroff":
        raise SettingsError("stop.on_done", "a pod cannot power off its node; use exit")
    emails = _strings(raw, "notify_emails", where)
    for email in emails:
        if not _EMAIL.match(email):
            raise SettingsError("stop.notify_emails", f"{email!r} is not an email address")
    if grant.budget is not None and provider in ("aws", "azure") and not emails:
        raise SettingsError(
            "stop.notify_emails",
            f"is required on {provider} when the grant has a budget (the budget alert's recipients)",
        )
    return StopSettings(
        max_runtime_hours=max_runtime, idle_minutes=idle, on_done=on_done, notify_emails=emails
    )


def _aws(raw: Mapping[str, Any]) -> AwsSettings:
    _known(raw, AWS_KEYS, "aws")
    return AwsSettings(vpc_cidr=_cidr(_str(raw, "vpc_cidr", "aws", "10.42.0.0/16"), "aws.vpc_cidr"))


def _gcp(raw: Mapping[str, Any]) -> GcpSettings:
    _known(raw, GCP_KEYS, "gcp")
    project = _str(raw, "project", "gcp")
    if not _GCP_PROJECT.match(project):
        raise SettingsError("gcp.project", f"{project!r} is not a project id")
    billing = _opt_str(raw, "billing_account", "gcp")
    if billing is not None and not _BILLING_ACCOUNT.match(billing):
        raise SettingsError(
            "gcp.billing_account", f"{billing!r} is not a billing account id (XXXXXX-XXXXXX-XXXXXX)"
        )
    return GcpSettings(
        project=project,
        billing_account=billing,
        subnet_cidr=_cidr(_str(raw, "subnet_cidr", "gcp", "10.42.0.0/20"), "gcp.subnet_cidr"),
    )


def _azure(raw: Mapping[str, Any]) -> AzureSettings:
    _known(raw, AZURE_KEYS, "azure")
    group = _str(raw, "resource_group", "azure")
    if not _AZURE_RG.match(group):
        raise SettingsError("azure.resource_group", f"{group!r} is not a resource group name")
    user = _str(raw, "admin_username", "azure", "spoteval")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user) or user in ("root", "admin", "administrator"):
        raise SettingsError("azure.admin_username", f"{user!r} is not an allowed Linux user name")
    key = _str(raw, "ssh_public_key", "azure")
    if not re.match(r"^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]+( .*)?$", key):
        raise SettingsError("azure.ssh_public_key", "must be an OpenSSH public key line")
    return AzureSettings(
        resource_group=group,
        admin_username=user,
        ssh_public_key=key,
        vnet_cidr=_cidr(_str(raw, "vnet_cidr", "azure", "10.42.0.0/16"), "azure.vnet_cidr"),
    )


def _k8s(raw: Mapping[str, Any]) -> K8sSettings:
    _known(raw, K8S_KEYS, "k8s")
    flavour = _choice(raw, "flavour", "k8s", tuple(K8S_FLAVOURS), None)
    namespace = _str(raw, "namespace", "k8s", "spot-eval")
    if not _K8S_NAME.match(namespace):
        raise SettingsError("k8s.namespace", f"{namespace!r} is not a Kubernetes namespace name")
    bucket_url = _str(raw, "bucket_url", "k8s")
    if not _BUCKET_URL.match(bucket_url):
        raise SettingsError(
            "k8s.bucket_url", f"must be s3://, gs:// or az:// BUCKET[/PREFIX], got {bucket_url!r}"
        )
    selector = _string_map(raw, "node_selector", "k8s")
    if flavour == "nebius" and not selector:
        raise SettingsError(
            "k8s.node_selector",
            "is required for nebius (labels of its preemptible node groups are not documented)",
        )
    return K8sSettings(
        flavour=flavour,
        namespace=namespace,
        create_namespace=_bool(raw, "create_namespace", "k8s", True),
        bucket_url=bucket_url.rstrip("/"),
        context=_opt_str(raw, "context", "k8s"),
        storage_class=_opt_str(raw, "storage_class", "k8s"),
        service_account_annotations=_string_map(raw, "service_account_annotations", "k8s"),
        node_selector=selector,
    )


def _nebius(raw: Mapping[str, Any]) -> NebiusSettings:
    _known(raw, NEBIUS_KEYS, "nebius")
    ids = {key: _str(raw, key, "nebius") for key in ("project_id", "tenant_id", "subnet_id")}
    for key, prefix in (("project_id", "project-"), ("tenant_id", "tenant-"), ("subnet_id", "vpcsubnet-")):
        if not ids[key].startswith(prefix):
            raise SettingsError(f"nebius.{key}", f"must be a Nebius {prefix}... id, got {ids[key]!r}")
    return NebiusSettings(**ids)


def _runpod(raw: Mapping[str, Any]) -> RunpodSettings:
    _known(raw, RUNPOD_KEYS, "runpod")
    bucket_url = _str(raw, "bucket_url", "runpod")
    if not bucket_url.startswith("s3://") or not _BUCKET_URL.match(bucket_url):
        raise SettingsError(
            "runpod.bucket_url",
            f"must be s3://BUCKET[/PREFIX] (Runpod has no object storage), got {bucket_url!r}",
        )
    endpoint = _str(raw, "s3_endpoint", "runpod")
    if not re.match(r"^https://[^\s/]+", endpoint):
        raise SettingsError("runpod.s3_endpoint", f"must be an https:// URL, got {endpoint!r}")
    secrets = _string_map(raw, "secrets", "runpod") or {
        "access_key_id": "spot_eval_s3_access_key_id",
        "secret_access_key": "spot_eval_s3_secret_access_key",
    }
    if set(secrets) != {"access_key_id", "secret_access_key"} or not all(
        re.fullmatch(r"[A-Za-z0-9_]+", v) for v in secrets.values()
    ):
        raise SettingsError(
            "runpod.secrets", "must name the Runpod secrets access_key_id and secret_access_key"
        )
    return RunpodSettings(
        bucket_url=bucket_url.rstrip("/"),
        s3_endpoint=endpoint.rstrip("/"),
        s3_region=_str(raw, "s3_region", "runpod", "us-east-1"),
        cloud_type=_choice(raw, "cloud_type", "runpod", ("SECURE", "COMMUNITY"), "SECURE"),
        secrets=secrets,
    )


def _workload(raw: Mapping[str, Any], node: NodeSettings, ev: EvalSettings, grant: Grant) -> Workload:
    """Validate the placement's block with the placement's own parser, then what ties it to this stack."""
    from spoteval.placement import PlacementError, parse_workload

    try:
        workload = parse_workload(raw, where="workload")
    except PlacementError as exc:
        raise SettingsError(exc.key, exc.problem) from None
    if workload.concurrency != ev.concurrency:
        raise SettingsError(
            "workload.concurrency",
            f"{workload.concurrency} differs from eval.concurrency {ev.concurrency}: "
            "the placement would describe another run",
        )
    for key in ("price_cap", "budget"):
        mine, theirs = getattr(grant, key), getattr(workload.grant, key)
        if theirs is not None and mine is not None and theirs > mine:
            raise SettingsError(f"workload.grant.{key}", f"{theirs} is above the stack grant's {key} {mine}")
    price = workload.prices.of(node.market)
    if grant.price_cap is not None and price is not None and price > grant.price_cap:
        raise SettingsError(
            f"workload.prices.{node.market}",
            f"{price} per node-hour on the {node.market} market (node.market) is above the grant's "
            f"price_cap {grant.price_cap}",
        )
    return workload


# --- entry points --------------------------------------------------------------------------------


def parse(raw: Mapping[str, Any], stack: str = "stack") -> Settings:
    """Parse the `spot-eval:*` config (keys without the namespace) into `Settings`."""
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise SettingsError(unknown[0], f"unknown key (known: {', '.join(TOP_KEYS)})")
    for key in REQUIRED_KEYS:
        if raw.get(key) in (None, ""):
            raise SettingsError(key, "is required")
    for key in OBJECT_KEYS:
        if key in raw and raw[key] is not None:
            _mapping(raw[key], key)

    provider = raw["provider"]
    if provider not in PROVIDERS:
        raise SettingsError("provider", f"must be one of {', '.join(PROVIDERS)}, got {provider!r}")
    try:
        grant = Grant.parse(raw["grant"], where="grant")
    except GrantError as exc:
        raise _grant_error(exc) from None

    region = raw["region"]
    if not isinstance(region, str):
        raise SettingsError("region", f"must be a string, got {region!r}")
    _region(provider, region)
    try:
        grant.check_region(region, key="region")
    except GrantError as exc:
        raise _grant_error(exc) from None
    zone = _zone(provider, region, raw.get("zone"))

    run_id = raw["run_id"]
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise SettingsError(
            "run_id",
            f"must be 2-32 lowercase letters, digits and dashes starting with a letter, got {run_id!r}",
        )

    node = _node(raw["node"], provider, grant)
    if node.max_price is not None and provider in BIDDING_PROVIDERS and grant.currency != "USD":
        raise SettingsError(
            "grant.currency",
            f"the {provider} bid (node.max_price, else grant.price_cap) is in USD, got {grant.currency!r}",
        )
    if node.pool and provider in API_STOP_PROVIDERS:
        raise SettingsError("node.count", f"{provider} stacks declare one node (0 or 1), got {node.count}")
    server = _server(raw["server"], provider)
    ev = _eval(raw["eval"])
    stop = _stop(raw.get("stop") or {}, provider, grant)

    blocks: dict[str, Any] = {}
    for name in PROVIDERS:
        block = raw.get(name) or {}
        if name != provider:
            if block:
                raise SettingsError(name, f"is set, but this stack's provider is {provider}")
            continue
        parsers = {
            "aws": _aws,
            "gcp": _gcp,
            "azure": _azure,
            "k8s": _k8s,
            "nebius": _nebius,
            "runpod": _runpod,
        }
        blocks[name] = parsers[name](block)

    workload_raw = raw.get("workload") or None
    workload = _workload(workload_raw, node, ev, grant) if workload_raw is not None else None

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
        **blocks,
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
