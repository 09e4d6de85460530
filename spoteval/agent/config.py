"""The agent's configuration: a strict parse of agent.json into frozen dataclasses, and its one builder.

`parse(raw)` is pure: every problem raises `ConfigError` naming the key (`node.provider`,
`episodes.concurrency`, ...). Unknown keys are refused, so a misspelt key never silently falls
back to a default. `load(path)` reads the file and parses it. `build_agent_config(...)` writes the
JSON object that `parse` reads: the VM startup script and the Runpod pod (components/) and the drill
(spoteval/drill/) all build the agent's config through it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypedDict
from urllib.parse import urlparse

from spoteval.agent.claimed import PoolSettings, parse_pool
from spoteval.agent.evalenv import EvalEnvConfig, parse_eval_env
from spoteval.config_reader import ErrorFactory, Reader
from spoteval.providers import BY_KEY, KEYS
from spoteval.record import MARKETS, RecordError, check_id
from spoteval.store import StoreError, check_url

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: only the type checker reads it

#: the providers a node may be on; `local` runs the agent on the user's machine (drills, tests)
PROVIDERS: Final = (*KEYS, "local")
PLACEHOLDERS: Final = ("{episode_id}", "{model_url}", "{output}")
#: the interpreter of the episodes: the eval environment's venv (agent/evalenv.py), else the agent's
PYTHON_PLACEHOLDER: Final = "{python}"
ON_DONE: Final = ("exit", "poweroff", "api_stop")
DEFAULT_SPOOL_DIR: Final = "/var/lib/spot-eval/spool"
DEFAULT_BOOT_FILE: Final = "/var/lib/spot-eval/boot.json"
DEFAULT_POWEROFF: Final = ("systemctl", "poweroff")
#: Providers where powering off from inside the OS does not stop the bill (or makes no sense).
NO_OS_POWEROFF: Final = {p.key: p.os_poweroff for p in BY_KEY.values() if p.os_poweroff is not None}
#: Store options the agent sets when the config does not: fail fast, the agent retries itself.
STORE_DEFAULTS: Final[Mapping[str, Any]] = {
    "max_retries": 2,
    "retry_timeout": 5,
    "init_backoff_s": 0.1,
    "max_backoff_s": 1,
    "connect_timeout": 3,
    "timeout": 30,
}


class ConfigError(Exception):
    """A configuration the agent refuses; the message names the key or file."""


@dataclass(frozen=True)
class NodeConfig:
    id: str
    provider: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    market: str = "spot"


@dataclass(frozen=True)
class ServerConfig:
    url: str
    command: tuple[str, ...] = ()
    health_path: str = "/health"
    ready_timeout_s: float = 600.0

    @property
    def health_url(self) -> str:
        return self.url.rstrip("/") + self.health_path


@dataclass(frozen=True)
class EpisodesConfig:
    command: tuple[str, ...]
    concurrency: int = 1
    max_attempts: int = 3
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class PriceConfig:
    per_hour: float
    currency: str = "USD"


@dataclass(frozen=True)
class StopRules:
    max_runtime_s: float | None = None
    idle_s: float | None = None
    budget: float | None = None
    price_cap: float | None = None  # the most per node-hour (the grant's price_cap)
    on_done: str = "exit"
    poweroff_command: tuple[str, ...] = DEFAULT_POWEROFF


@dataclass(frozen=True)
class AgentConfig:
    run_id: str
    store: str
    node: NodeConfig
    server: ServerConfig
    episodes: EpisodesConfig
    store_options: Mapping[str, Any] = field(default_factory=dict)
    metadata_url: str | None = None
    metadata_poll_s: float | None = None
    price: PriceConfig | None = None
    price_api_url: str | None = None
    price_timeout_s: float = 5.0  # how long one price API request may take
    stop_rules: StopRules = StopRules()
    heartbeat_s: float = 30.0
    spool_dir: str = DEFAULT_SPOOL_DIR
    work_dir: str | None = None
    boot_file: str = DEFAULT_BOOT_FILE
    sigterm_grace_s: float | None = None
    flush_timeout_s: float = 300.0
    price_refresh_s: float | None = None  # None: the provider's interval (see agent/price.py)
    pool: PoolSettings | None = None  # one of several nodes sharing the run (spoteval.claims)
    eval_env: EvalEnvConfig | None = None  # the user's eval project and requirements (agent/evalenv.py)

    def store_options_with_defaults(self) -> dict[str, Any]:
        return {**STORE_DEFAULTS, **self.store_options}

    def run_spool_dir(self) -> str:
        return os.path.join(self.spool_dir, self.run_id)

    def run_work_dir(self) -> str:
        if self.work_dir is not None:
            return os.path.join(self.work_dir, self.run_id)
        return os.path.join(tempfile.gettempdir(), f"spot-eval-{self.run_id}")


# --- the config reader, in the agent's wording -----------------------------------------------------


def _config_error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"{key}: {problem}")


class _Section(Reader):
    """A JSON object of the config being read (spoteval/config_reader.py), in the agent's published
    wording: `missing key X`, `unknown key X, Y`, one message for a bad integer."""

    NOT_MAPPING = "must be a JSON object, got {type}"
    NOT_INTEGER = "must be an integer >= {minimum}, got {value!r}"
    INTEGER_BELOW = "must be an integer >= {minimum}, got {value!r}"

    def __init__(
        self,
        raw: object,
        where: str = "",
        *,
        error: ErrorFactory = _config_error,
        known: Iterable[str] | None = None,
        label: str = "config",
    ) -> None:
        super().__init__(raw, where, error=error, known=known, label=label)

    def missing(self, key: str) -> NoReturn:
        raise ConfigError(f"missing key {self.path(key)}")

    def done(self) -> None:
        unknown = sorted(str(k) for k in self.raw if k not in self.seen)
        if unknown:
            raise ConfigError(f"unknown key {', '.join(self.path(k) for k in unknown)}")


def _http_url(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{key}: {value!r} is not an http(s) URL")
    return value.rstrip("/")


def _abs_path(value: str | None, key: str) -> str | None:
    if value is not None and not os.path.isabs(value):
        raise ConfigError(f"{key}: {value!r} must be an absolute path")
    return value


# --- the parse ----------------------------------------------------------------------------------


def parse(raw: object) -> AgentConfig:
    """Parse and check a configuration object; raises ConfigError naming the offending key."""
    top = _Section(raw, "")
    run_id, store, options = _run_and_store(top)
    node = _node(top.section("node"))
    metadata_url = _http_url(top.opt_string("metadata_url"), "metadata_url")
    metadata_poll_s = top.opt_number("metadata_poll_s", positive=True)
    server = _server(top.section("server"))
    episodes = _episodes(top.section("episodes"))
    price = _price(top.opt_section("price"))
    price_api_url = _http_url(top.opt_string("price_api_url"), "price_api_url")
    rules = _stop_rules(top.opt_section("stop_rules"), node.provider)
    _check_priced_rules(rules, price, node)
    config = AgentConfig(
        run_id=run_id,
        store=store,
        node=node,
        server=server,
        episodes=episodes,
        store_options=options,
        metadata_url=metadata_url,
        metadata_poll_s=metadata_poll_s,
        price=price,
        price_api_url=price_api_url,
        price_timeout_s=top.number("price_timeout_s", 5.0, positive=True),
        stop_rules=rules,
        heartbeat_s=top.number("heartbeat_s", 30.0, positive=True),
        spool_dir=_abs_path(top.opt_string("spool_dir"), "spool_dir") or DEFAULT_SPOOL_DIR,
        work_dir=_abs_path(top.opt_string("work_dir"), "work_dir"),
        boot_file=_abs_path(top.opt_string("boot_file"), "boot_file") or DEFAULT_BOOT_FILE,
        sigterm_grace_s=top.opt_number("sigterm_grace_s", positive=True),
        flush_timeout_s=top.number("flush_timeout_s", 300.0, positive=True),
        price_refresh_s=top.opt_number("price_refresh_s", positive=True),
        pool=_pool(top.value("pool")),
        eval_env=_eval_env(top.opt_section("eval_env")),
    )
    top.done()
    return config


def _run_and_store(top: Reader) -> tuple[str, str, dict[str, Any]]:
    """The run's id, the run record's store URL and the store's options."""
    run_id = top.string("run_id")
    try:
        check_id(run_id, "run_id")
    except RecordError as exc:
        raise ConfigError(str(exc)) from None
    store = top.string("store")
    try:
        check_url(store)
    except StoreError as exc:
        raise ConfigError(f"store: {exc}") from None
    options_raw = top.value("store_options") or {}
    if not isinstance(options_raw, dict):
        raise ConfigError(f"store_options: must be a JSON object, got {options_raw!r}")
    return run_id, store, dict(options_raw)


def _node(section: Reader) -> NodeConfig:
    node_id = section.string("id")
    provider = section.string("provider")
    if provider not in PROVIDERS:
        raise ConfigError(f"node.provider: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    market = section.opt_string("market") or "spot"
    if market not in MARKETS:
        raise ConfigError(f"node.market: {market!r} is not one of {', '.join(sorted(MARKETS))}")
    node = NodeConfig(
        id=node_id,
        provider=provider,
        region=section.opt_string("region"),
        zone=section.opt_string("zone"),
        instance_type=section.opt_string("instance_type"),
        market=market,
    )
    section.done()
    return node


def _server(section: Reader) -> ServerConfig:
    server_url = _http_url(section.string("url"), "server.url")
    assert server_url is not None
    health_path = section.opt_string("health_path") or "/health"
    if not health_path.startswith("/"):
        raise ConfigError(f"server.health_path: {health_path!r} must start with /")
    server = ServerConfig(
        url=server_url,
        command=section.argv("command", required=False),
        health_path=health_path,
        ready_timeout_s=section.number("ready_timeout_s", 600.0, positive=True),
    )
    section.done()
    return server


def _episodes(section: Reader) -> EpisodesConfig:
    command = section.argv("command", required=True)
    if "{output}" not in " ".join(command):
        raise ConfigError("episodes.command: must contain the {output} placeholder (the result file)")
    episodes = EpisodesConfig(
        command=command,
        concurrency=section.integer("concurrency", 1),
        max_attempts=section.integer("max_attempts", 3),
        timeout_s=section.number("timeout_s", 3600.0, positive=True),
    )
    section.done()
    return episodes


def _price(section: Reader | None) -> PriceConfig | None:
    if section is None:
        return None
    per_hour = section.number("per_hour")
    price = PriceConfig(per_hour=per_hour, currency=section.opt_string("currency") or "USD")
    section.done()
    return price


def _stop_rules(section: Reader | None, provider: str) -> StopRules:
    """The stop rules; `on_done` is checked against what stops a node of `provider`."""
    if section is None:
        return StopRules()
    on_done = section.opt_string("on_done") or "exit"
    if on_done not in ON_DONE:
        raise ConfigError(f"stop_rules.on_done: {on_done!r} is not one of {', '.join(ON_DONE)}")
    explicit_poweroff = section.has("poweroff_command")
    poweroff = section.argv("poweroff_command", required=False) or DEFAULT_POWEROFF
    if on_done == "api_stop":  # power off = stop through the provider's API (agent/api_stop.py)
        from spoteval.agent import api_stop

        if provider not in api_stop.PROVIDERS or explicit_poweroff:
            raise ConfigError(
                f"stop_rules.on_done: api_stop stops {' and '.join(api_stop.PROVIDERS)} nodes through "
                f"their API, without a poweroff_command (node.provider is {provider})"
            )
        on_done, poweroff, explicit_poweroff = "poweroff", api_stop.command(provider), True
    if on_done == "poweroff" and not explicit_poweroff and provider in NO_OS_POWEROFF:
        raise ConfigError(
            f"stop_rules.on_done: poweroff from inside the OS does not stop a {provider} node "
            f"({NO_OS_POWEROFF[provider]}); use exit, or set stop_rules.poweroff_command"
        )
    rules = StopRules(
        max_runtime_s=section.opt_number("max_runtime_s", positive=True),
        idle_s=section.opt_number("idle_s", positive=True),
        budget=section.opt_number("budget", positive=True),
        price_cap=section.opt_number("price_cap", positive=True),
        on_done=on_done,
        poweroff_command=poweroff,
    )
    section.done()
    return rules


def _check_priced_rules(rules: StopRules, price: PriceConfig | None, node: NodeConfig) -> None:
    """A budget or price cap needs a price: the configured one, or the node's own read of it."""
    facts = BY_KEY.get(node.provider)
    reads_own_price = (
        facts is not None and facts.price is not None and node.market in facts.price.node_markets
    )
    for rule, value in (("budget", rules.budget), ("price_cap", rules.price_cap)):
        if value is not None and price is None and not reads_own_price:
            raise ConfigError(
                f"stop_rules.{rule}: needs price.per_hour (a {node.provider} {node.market} node cannot "
                f"read its own price, so the {rule} could never be checked)"
            )


def _eval_env(section: Reader | None) -> EvalEnvConfig | None:
    return None if section is None else parse_eval_env(section)


def _pool(raw: object) -> PoolSettings | None:
    try:
        return parse_pool(raw)
    except ValueError as exc:
        raise ConfigError(f"pool: {exc}") from None


def load(path: str) -> AgentConfig:
    """Read and parse a config file; ConfigError names the file for unreadable or non-JSON input."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"config {path}: not JSON: {exc}") from None
    try:
        return parse(raw)
    except ConfigError as exc:
        raise ConfigError(f"config {path}: {exc}") from None


class _AgentConfigRequired(TypedDict):
    run_id: str
    store: str
    node_id: str  # may be a placeholder the node replaces at boot
    provider: str
    region: str | None
    instance_type: str | None
    server_url: str
    episodes_command: Sequence[str]
    concurrency: int
    max_attempts: int
    timeout_s: float
    heartbeat_s: float


class AgentConfigArgs(_AgentConfigRequired, total=False):
    """What `build_agent_config` takes: the keys above are required, these optional (None: left
    out of the config, so the agent's default applies)."""

    market: str  # "spot" unless given
    zone: str | None
    server_command: Sequence[str] | None  # None: the model server runs elsewhere
    health_path: str | None
    ready_timeout_s: float | None
    on_done: str  # "exit" unless given
    max_runtime_s: float | None
    idle_s: float | None
    budget: float | None
    price_cap: float | None
    price_per_hour: float | None
    currency: str  # "USD" unless given
    store_options: Mapping[str, Any] | None
    metadata_url: str | None
    sigterm_grace_s: float | None
    spool_dir: str | None
    work_dir: str | None
    boot_file: str | None
    pool: Mapping[str, Any] | None
    eval_env: Mapping[str, Any] | None


def build_agent_config(**args: Unpack[AgentConfigArgs]) -> dict[str, Any]:
    """The agent's config as a JSON object (what `parse` reads); optional keys are left out when None.

    `server_command` None: the model server runs elsewhere (a Kubernetes Deployment) and the agent
    only waits for it at `server_url`. `node_id` may be a placeholder the node replaces at boot.
    """
    given = _given(args)
    config: dict[str, Any] = {"run_id": args["run_id"], "store": args["store"]}
    if "store_options" in given:
        config["store_options"] = dict(given["store_options"])
    config["node"] = {
        "id": args["node_id"],
        "provider": args["provider"],
        **_picked(given, "region"),
        **({"zone": given["zone"]} if given.get("zone") else {}),
        **_picked(given, "instance_type"),
        "market": args.get("market", "spot"),
    }
    config["server"] = {
        "url": args["server_url"],
        **({"command": list(given["server_command"])} if "server_command" in given else {}),
        **_picked(given, "health_path", "ready_timeout_s"),
    }
    config["episodes"] = {
        "command": list(args["episodes_command"]),
        "concurrency": args["concurrency"],
        "max_attempts": args["max_attempts"],
        "timeout_s": args["timeout_s"],
    }
    if "price_per_hour" in given:
        config["price"] = {"per_hour": given["price_per_hour"], "currency": args.get("currency", "USD")}
    config["stop_rules"] = {
        "on_done": args.get("on_done", "exit"),
        **_picked(given, "max_runtime_s", "idle_s", "budget", "price_cap"),
    }
    config["heartbeat_s"] = args["heartbeat_s"]
    config.update(_picked(given, "metadata_url", "sigterm_grace_s", "spool_dir", "work_dir", "boot_file"))
    config.update({key: dict(given[key]) for key in ("pool", "eval_env") if key in given})
    return config


def _given(args: AgentConfigArgs) -> dict[str, Any]:
    """The arguments that are not None (a None one is left out of the config); a missing required
    argument or an unknown one is a TypeError, as for any function's keywords."""
    required, optional = AgentConfigArgs.__required_keys__, AgentConfigArgs.__optional_keys__
    missing = sorted(required - set(args))
    unknown = sorted(set(args) - required - optional)
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"unknown {', '.join(unknown)}"] if unknown else []
    )
    if problems:
        raise TypeError(f"build_agent_config(): {'; '.join(problems)}")
    return {key: value for key, value in args.items() if value is not None}


def _picked(given: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {key: given[key] for key in keys if key in given}


def substitute(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace `{name}` placeholders in each argument (plain text replacement, no format syntax)."""
    out: list[str] = []
    for arg in argv:
        text = arg
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        out.append(text)
    return out
