"""Render a stack without a cloud account: run the real program (`__main__.py`) against Pulumi's mock
engine and record everything it declares.

Used by the tests and by `python -m scripts.plan`. The mock engine answers every resource with its
own inputs plus the outputs the program reads (ids, ARNs, names), and every data-source call with an
empty result (the program makes none).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import runpy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from components.base import CLOCK, PROJECT_DIR, STACK_FILE
from components.settings import NAMESPACE, SettingsError
from spoteval.config_reader import DocumentError, describe, read_mapping

STACKS_DIR: Final = PROJECT_DIR / "stacks"
PROGRAM: Final = PROJECT_DIR / "__main__.py"


class RenderError(Exception):
    """The program refused the stack's config (the message names the key), or the stack file is bad."""


@dataclass(frozen=True)
class Declared:
    """One resource the program declared, as the engine saw it."""

    type: str
    name: str
    urn: str
    custom: bool
    parent: str
    provider: str
    inputs: Mapping[str, Any]
    protect: bool
    retain_on_delete: bool
    ignore_changes: tuple[str, ...]
    depends_on: tuple[str, ...]
    delete_before_replace: bool = False
    replace_on_changes: tuple[str, ...] = ()
    #: URNs this resource had before (its `aliases` given as full URNs)
    aliases: tuple[str, ...] = ()

    @property
    def token_module(self) -> str:
        return self.type.split(":")[0]


#: the project number the engine answers for any GCP project (the Budget API wants the number)
MOCK_PROJECT_NUMBER: Final = "123456789012"


@dataclass(frozen=True)
class Called:
    """A data-source call the program made: its token, arguments and the provider it went through."""

    token: str
    args: dict[str, Any]
    provider: str


@dataclass
class Rendered:
    stack: str
    resources: list[Declared] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[Called] = field(default_factory=list)

    def of_type(self, token: str) -> list[Declared]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str) -> Declared:
        found = self.of_type(token)
        if len(found) != 1:
            raise AssertionError(f"{token}: expected one resource, found {len(found)}")
        return found[0]

    def by_urn(self, urn: str) -> Declared | None:
        return next((r for r in self.resources if r.urn == urn), None)


def _fake_id(typ: str, name: str) -> str:
    digest = hashlib.sha256(f"{typ}/{name}".encode()).hexdigest()
    prefixes = {
        "aws:ec2/instance:Instance": "i-0",
        "aws:ebs/volume:Volume": "vol-0",
        "aws:ec2/launchTemplate:LaunchTemplate": "lt-0",
        "aws:ec2/vpc:Vpc": "vpc-0",
        "aws:ec2/subnet:Subnet": "subnet-0",
        "aws:ec2/securityGroup:SecurityGroup": "sg-0",
    }
    if typ in prefixes:
        return prefixes[typ] + digest[:16]
    if typ.startswith("azure-native:"):
        return (
            f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/mock/providers/{typ}/{name}"
        )
    return f"{name}-{digest[:8]}"


#: azure-native resources whose name is an input (the engine answers `name` with it)
_AZURE_NAME_INPUTS: Final = {
    "azure-native:resources:ResourceGroup": "resourceGroupName",
    "azure-native:storage:StorageAccount": "accountName",
    "azure-native:storage:BlobContainer": "containerName",
    "azure-native:storage:Blob": "blobName",
    "azure-native:consumption:Budget": "budgetName",
}


class Mocks(pulumi_mocks.Mocks):
    """Answers with the inputs plus the outputs the program reads."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        rid = _fake_id(args.typ, args.name)
        state: dict[str, Any] = dict(args.inputs)
        name_input = _AZURE_NAME_INPUTS.get(args.typ)
        if name_input and args.inputs.get(name_input):
            state["name"] = args.inputs[name_input]
        state.setdefault("name", args.name)
        if args.typ.startswith("aws:"):
            state.setdefault("arn", f"arn:aws:mock:::{args.name}")
        if args.typ == "aws:s3/bucket:Bucket":
            state["bucket"] = rid
        if args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        if args.typ == "gcp:serviceaccount/account:Account":
            state["email"] = f"{args.inputs.get('accountId', args.name)}@mock.iam.gserviceaccount.com"
        if args.typ.startswith("gcp:"):
            state.setdefault("selfLink", f"https://www.googleapis.com/compute/v1/mock/{args.name}")
            state.setdefault("selfLinkUnique", f"https://www.googleapis.com/compute/v1/mock/{args.name}?id=1")
            state.setdefault("url", f"gs://{args.name}")
        if args.typ == "azure-native:managedidentity:UserAssignedIdentity":
            state["principalId"] = "11111111-1111-1111-1111-111111111111"
            state["clientId"] = "22222222-2222-2222-2222-222222222222"
        identity = state.get("identity")
        if args.typ.startswith("azure-native:") and isinstance(identity, dict):
            # Inputs list the identities; the engine answers with a map of them.
            ids = identity.get("userAssignedIdentities") or []
            state["identity"] = {**identity, "userAssignedIdentities": {i: {} for i in ids}}
        if args.typ.startswith("kubernetes:"):
            metadata = dict(state.get("metadata") or {})
            metadata.setdefault("name", args.name)
            state["metadata"] = metadata
        if args.typ == "nebius:index/iamV2AccessKey:IamV2AccessKey":
            # The engine's answer: the MysteryBox secret the key's secret was delivered into.
            state["status"] = {"secretReferenceId": f"mbsec-{args.name}", "awsAccessKeyId": f"AK-{args.name}"}
        return rid, state

    def __init__(self) -> None:
        self.calls: list[Called] = []

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        self.calls.append(Called(args.token, _plain(dict(args.args)), args.provider))
        if args.token == "gcp:organizations/getProject:getProject":
            project = args.args.get("projectId") or "mock-project"
            return {"projectId": project, "number": MOCK_PROJECT_NUMBER, "name": project}, []
        return {}, []


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock engine, also keeping what the SDK sends about each resource: parent, provider,
    protect, retain-on-delete, ignore-changes, dependencies, delete-before-replace,
    replace-on-changes and aliases given as URNs."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.declared: list[Declared] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
            self.declared.append(
                Declared(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    custom=bool(request.custom),
                    parent=request.parent,
                    provider=request.provider,
                    inputs=_plain(inputs),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    ignore_changes=tuple(request.ignoreChanges),
                    depends_on=tuple(request.dependencies),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    replace_on_changes=tuple(request.replaceOnChanges),
                    aliases=tuple(a.urn for a in request.aliases if a.urn),
                )
            )
        return response


def _plain(value: Any) -> Any:
    """Deserialized properties as plain JSON-like values (assets become their path or text)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.FileAsset):
        return {"asset": "file", "path": str(value.path)}
    if isinstance(value, pulumi.StringAsset):
        return {"asset": "string", "text": value.text}
    if isinstance(value, pulumi.Resource):
        return f"<resource {type(value).__name__}>"
    return value


def stack_files(stacks_dir: Path = STACKS_DIR) -> list[Path]:
    return sorted(stacks_dir.glob("Pulumi.*.yaml"))


def stack_name(path: Path) -> str:
    return path.name[len("Pulumi.") : -len(".yaml")]


def read_stack_config(path: Path) -> dict[str, Any]:
    """The `config:` block of a stack file, keys as written (`spot-eval:node`, `aws:region`, ...).
    A file that cannot be read, is empty or is not YAML names the file (and the line)."""
    try:
        data = read_mapping(path)
    except DocumentError as exc:
        raise RenderError(describe(exc, "stack file")) from None
    config = data.get("config")
    if not isinstance(config, dict):
        raise RenderError(f"{path}: has no `config:` mapping")
    return config


def engine_id(resource: Declared) -> str:
    """The id the mock engine gave `resource` (what other resources' inputs name it by)."""
    return _fake_id(resource.type, resource.name)


def engine_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Config values as the engine hands them to a program: strings, objects and lists as JSON."""
    out: dict[str, str] = {}
    for key, value in config.items():
        full = key if ":" in key else f"{NAMESPACE}:{key}"
        if isinstance(value, str):
            out[full] = value
        elif isinstance(value, bool):
            out[full] = "true" if value else "false"
        elif isinstance(value, int | float):
            out[full] = str(value)
        else:
            out[full] = json.dumps(value)
    return out


def render_config(stack: str, config: Mapping[str, Any], *, now: datetime | None = None) -> Rendered:
    """Run the program on the given config under the mock engine and return what it declared."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = Mocks()
    monitor = RecordingMonitor(mocks)
    # A fresh root stack for every render (set_mocks makes one only when none is left over).
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="spot-eval", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(engine_config(config))
    token = CLOCK.set(now)
    try:
        try:
            loop.run_until_complete(
                pulumi.runtime.stack.run_pulumi_func(
                    lambda: runpy.run_path(str(PROGRAM), run_name="__pulumi_program__")  # type: ignore[arg-type,return-value]
                )
            )
        except (pulumi.RunError, SettingsError) as exc:
            raise RenderError(str(exc)) from None
        root = pulumi.runtime.settings.get_root_resource()
        exported = getattr(root, "outputs", {})
        outputs = loop.run_until_complete(pulumi.Output.from_input(exported).future()) or {}
    finally:
        CLOCK.reset(token)
        loop.close()
        asyncio.set_event_loop(None)
    return Rendered(
        stack=stack, resources=list(monitor.declared), outputs=_plain(outputs), calls=list(mocks.calls)
    )


def render_stack(path: Path, *, now: datetime | None = None) -> Rendered:
    """Render a stack file; its eval block's paths are relative to the file's repository."""
    token = STACK_FILE.set(path)
    try:
        return render_config(stack_name(path), read_stack_config(path), now=now)
    finally:
        STACK_FILE.reset(token)
