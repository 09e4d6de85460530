"""What each provider says about the inputs the stacks set: which force a replacement, which the
provider keeps when they are removed, which hold free-form keys (tests/data/provider_schemas/).

Each file is an extract, for the resource types and input paths the rendered stacks use, of the
provider's own source (the upstream Terraform resource's ForceNew / Optional / Computed flags for
the bridged providers, pulumi-kubernetes's forceNew table, azure-native's path-parameter and
forceNewMap rules), with the repository, commit, version and licence it was read from. Paths are
engine (camelCase) names joined with dots; list elements add no segment; a `map` property's keys
are data and are not paths.

Flags: `required`, `optional`, `computed` (as upstream declares them), `replace` (a change, an
addition or a removal of the value replaces the resource), `replace_if` (upstream replaces on a
change only under a condition, named in the resource's `conditional` notes), `kept_when_removed`
(Optional + Computed under the Terraform SDKv2 diff: an input removed from the program plans no
change at all, the provider keeps what it has, hashicorp/terraform-provider-aws#38141) and `map`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Final

DATA_DIR: Final = Path(__file__).parent / "data" / "provider_schemas"
FLAGS: Final = frozenset(
    {"required", "optional", "computed", "replace", "replace_if", "kept_when_removed", "map"}
)
SEMANTICS: Final = frozenset({"terraform-sdkv2", "terraform-framework", "kubernetes", "azure-native"})
#: what a rendered input holds that is one value, not a path: a Pulumi secret, an asset
SECRET_SIG: Final = "4dabf18193072939515e22adb298388d"
_FILE_KEYS: Final = frozenset(
    {"provider", "package", "checked", "semantics", "sources", "limits", "resources"}
)
_RESOURCE_KEYS: Final = frozenset(
    {"upstream", "path", "kind", "put", "path_parameters", "force_new_map", "conditional", "properties"}
)
_SOURCE_KEYS: Final = frozenset({"repository", "url", "commit", "version", "licence", "read"})


class SchemaError(ValueError):
    """A data file that does not have the expected shape (the message names the file and the key)."""


@dataclass(frozen=True)
class Property:
    path: str
    flags: frozenset[str]

    @property
    def replaces(self) -> bool:
        return "replace" in self.flags

    @property
    def kept_when_removed(self) -> bool:
        return "kept_when_removed" in self.flags

    @property
    def is_map(self) -> bool:
        return "map" in self.flags


@dataclass(frozen=True)
class ResourceSchema:
    token: str
    provider: str
    semantics: str
    properties: Mapping[str, Property]
    #: the upstream resource (Terraform name, Kubernetes kind or ARM PUT path) and what upstream does
    #: beyond the flags
    upstream: str = ""
    conditional: tuple[str, ...] = ()

    def get(self, path: str) -> Property | None:
        return self.properties.get(path)


@dataclass(frozen=True)
class Source:
    repository: str
    url: str
    licence: str
    commit: str = ""
    version: str = ""
    read: str = ""


@dataclass(frozen=True)
class ProviderSchema:
    provider: str
    package: str
    package_version: str
    checked: date
    semantics: str
    sources: tuple[Source, ...]
    limits: tuple[str, ...]
    resources: Mapping[str, ResourceSchema]


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(f"{where}: must be a list of strings")
    return tuple(value)


def _keys(obj: Any, allowed: frozenset[str], where: str, required: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise SchemaError(f"{where}: must be an object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise SchemaError(f"{where}: unknown key {unknown[0]!r}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise SchemaError(f"{where}: missing key {missing[0]!r}")
    return obj


def _resource(token: str, raw: Any, provider: str, semantics: str, where: str) -> ResourceSchema:
    obj = _keys(raw, _RESOURCE_KEYS, where, ("properties",))
    props = obj["properties"]
    if not isinstance(props, dict) or not props:
        raise SchemaError(f"{where}.properties: must be a non-empty object")
    out: dict[str, Property] = {}
    for path, flags in props.items():
        names = frozenset(_strings(flags, f"{where}.properties.{path}"))
        bad = sorted(names - FLAGS)
        if bad:
            raise SchemaError(f"{where}.properties.{path}: unknown flag {bad[0]!r}")
        out[path] = Property(path, names)
    upstream = obj.get("upstream") or obj.get("kind") or obj.get("put") or ""
    return ResourceSchema(
        token=token,
        provider=provider,
        semantics=semantics,
        properties=out,
        upstream=str(upstream),
        conditional=_strings(obj.get("conditional", []), f"{where}.conditional"),
    )


def load(path: Path) -> ProviderSchema:
    """One data file, checked: every key known, every flag known, every source with its licence."""
    where = path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{where}: cannot read: {exc}") from None
    obj = _keys(raw, _FILE_KEYS, where, tuple(sorted(_FILE_KEYS)))
    semantics = obj["semantics"]
    if semantics not in SEMANTICS:
        raise SchemaError(f"{where}.semantics: unknown {semantics!r}")
    package = _keys(obj["package"], frozenset({"name", "version"}), f"{where}.package", ("name", "version"))
    try:
        checked = date.fromisoformat(str(obj["checked"]))
    except ValueError:
        raise SchemaError(f"{where}.checked: not a date: {obj['checked']!r}") from None
    sources = []
    for i, s in enumerate(obj["sources"] or []):
        src = _keys(s, _SOURCE_KEYS, f"{where}.sources[{i}]", ("repository", "url", "licence"))
        sources.append(Source(**{k: str(v) for k, v in src.items()}))
    if not sources:
        raise SchemaError(f"{where}.sources: at least one source is needed")
    resources = obj["resources"]
    if not isinstance(resources, dict):
        raise SchemaError(f"{where}.resources: must be an object")
    provider = str(obj["provider"])
    return ProviderSchema(
        provider=provider,
        package=str(package["name"]),
        package_version=str(package["version"]),
        checked=checked,
        semantics=semantics,
        sources=tuple(sources),
        limits=_strings(obj["limits"], f"{where}.limits"),
        resources={
            token: _resource(token, r, provider, semantics, f"{where}.resources.{token}")
            for token, r in resources.items()
        },
    )


def load_all(directory: Path = DATA_DIR) -> dict[str, ResourceSchema]:
    """type token -> its resource schema, across every provider's file."""
    out: dict[str, ResourceSchema] = {}
    for path in sorted(directory.glob("*.json")):
        for token, resource in load(path).resources.items():
            if token in out:
                raise SchemaError(f"{path.name}: {token} is also in another file")
            out[token] = resource
    return out


def is_value(value: Any) -> bool:
    """A rendered input that is one value (a scalar, a secret, an asset, an empty list or object)."""
    if isinstance(value, Mapping):
        return not value or SECRET_SIG in value or "asset" in value
    if isinstance(value, list):
        return not value
    return True


def input_paths(inputs: Mapping[str, Any], schema: ResourceSchema | None = None) -> Iterator[str]:
    """Every property path the inputs set, parents included; with a schema, a `map` property's keys
    (and anything under a path the schema does not know) are not walked."""

    def walk(value: Any, path: str) -> Iterator[str]:
        yield path
        if schema is not None:
            known = schema.get(path)
            if known is None or known.is_map:
                return
        if is_value(value):
            return
        if isinstance(value, list):
            for item in value:
                yield from walk_children(item, path)
        else:
            yield from walk_children(value, path)

    def walk_children(value: Any, path: str) -> Iterator[str]:
        if isinstance(value, Mapping) and not is_value(value):
            for key, child in value.items():
                yield from walk(child, f"{path}.{key}")
        elif isinstance(value, list):
            for item in value:
                yield from walk_children(item, path)

    for key, value in inputs.items():
        yield from walk(value, key)


def uncovered(schema: ResourceSchema, inputs: Mapping[str, Any]) -> list[str]:
    """The paths the inputs set that the schema has no knowledge of (sorted, no repeats)."""
    return sorted({p for p in input_paths(inputs, schema) if schema.get(p) is None})
