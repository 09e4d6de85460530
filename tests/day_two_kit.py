"""What `pulumi up` would plan between two renders of a stack under the mock engine (tests/test_day_two.py).

A resource keeps its identity when the later render declares its URN, or names it in `aliases`. Of
the resources that keep it, one whose inputs changed is replaced when a changed property is
replace-only: named in its `replace_on_changes`, or in REPLACE_ONLY below (the providers' schemas,
checked 2026-12-01), or holding the id of a replaced resource under such a property (the engine
then replaces it too). Everything else that changed is updated in place.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

from components.mocks import (
    Declared,
    Rendered,
    RenderError,
    _fake_id,
    read_stack_config,
    render_config,
    stack_files,
    stack_name,
)

NOW: Final = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
STACKS: Final = {stack_name(p): p for p in stack_files()}

#: type -> replace-only input paths ("*": every input), as the providers' schemas say:
#: - AWS (terraform-provider-aws, internal/service/ec2): `aws_instance` instance_market_options,
#:   launch_template and subnet_id are ForceNew; every argument of `aws_volume_attachment` is.
#: - GCP (terraform-provider-google, resource_compute_instance.go): scheduling.provisioning_model
#:   is ForceNew; an instance template is immutable (every argument ForceNew).
#: - Kubernetes (pulumi-kubernetes provider, forceNew table): metadata name and namespace of every
#:   kind; Job spec.selector and spec.template; Deployment spec.selector; PersistentVolumeClaim
#:   spec (access modes, resources, storage class); ConfigMap data and binaryData.
#: - Azure and Nebius: what the stack names in `replace_on_changes` (recorded per resource).
REPLACE_ONLY: Final[Mapping[str, tuple[str, ...]]] = {
    "aws:ec2/instance:Instance": ("instanceMarketOptions", "launchTemplate", "subnetId"),
    "aws:ec2/volumeAttachment:VolumeAttachment": ("deviceName", "instanceId", "volumeId"),
    "gcp:compute/instance:Instance": ("scheduling.provisioningModel",),
    "gcp:compute/instanceTemplate:InstanceTemplate": ("*",),
    "kubernetes:batch/v1:Job": ("metadata.name", "metadata.namespace", "spec.selector", "spec.template"),
    "kubernetes:apps/v1:Deployment": ("metadata.name", "metadata.namespace", "spec.selector"),
    "kubernetes:core/v1:PersistentVolumeClaim": ("metadata.name", "metadata.namespace", "spec"),
    "kubernetes:core/v1:ConfigMap": ("metadata.name", "metadata.namespace", "data", "binaryData"),
}

#: what holds an exclusive attachment, and must be replaced delete-first: a VM holding the weights
#: disk (and on Azure its NIC), a volume attachment, a NIC holding the public IP, resources with a
#: fixed name that hold a disk or a ReadWriteOnce claim. (An AWS Elastic IP follows its instance in
#: place; a GCP reserved address is held by the instance, which is delete-first.)
EXCLUSIVE: Final = frozenset(
    {
        "aws:ec2/instance:Instance",
        "aws:ec2/volumeAttachment:VolumeAttachment",
        "gcp:compute/instance:Instance",
        "azure-native:compute:VirtualMachine",
        "azure-native:network:NetworkInterface",
        "nebius:index/computeV1Instance:ComputeV1Instance",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:batch/v1:Job",
    }
)
#: Nebius's boot disk (fixed name, held by the VM) and the Runpod pod (a dynamic resource)
EXCLUSIVE_NAMES: Final = ("-boot", "-pod")

#: workflow -> (config changes before, config changes after), relative to the stack file (one node,
#: spot). Kubernetes pools also name a ReadWriteMany storage class for the shared spool.
WORKFLOWS: Final[Mapping[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "stop the node": ({}, {"node__count": 0}),
    "resume": ({"node__count": 0}, {}),
    "pool": ({}, {"node__count": 2}),
    "flip market": ({}, {"node__market": "on_demand"}),
    "static address": ({}, {"node__address": "static"}),
}
POOL_EXTRA: Final = {"k8s": {"k8s__shared_spool_class": "standard-rwx"}}
#: the Nebius stack's grant caps the price below its on-demand price: its flip is rendered with a cap
#: above it, on both sides (the grant refusing a market is tests/test_settings.py's)
FLIP_BOTH: Final = {"nebius": {"grant__price_cap": 3.0}}


def provider_of(stack: str) -> str:
    return str(read_stack_config(STACKS[stack])["spot-eval:provider"])


def render(stack: str, changes: Mapping[str, Any]) -> Rendered:
    """The stack with `block__key=value` changes, rendered (RenderError: refused)."""
    config = copy.deepcopy(read_stack_config(STACKS[stack]))
    for path, value in changes.items():
        block, key = path.split("__")
        config.setdefault(f"spot-eval:{block}", {})[key] = value
    return render_config(stack, config, now=NOW)


def workflow_changes(stack: str, workflow: str) -> tuple[dict[str, Any], dict[str, Any]]:
    before, after = WORKFLOWS[workflow]
    if workflow == "pool":
        after = {**after, **POOL_EXTRA.get(provider_of(stack), {})}
    if workflow == "flip market":  # to the other market (a Runpod stack is on-demand: to spot)
        current = read_stack_config(STACKS[stack])["spot-eval:node"]["market"]
        after = {**after, "node__market": "spot" if current == "on_demand" else "on_demand"}
        both = FLIP_BOTH.get(provider_of(stack), {})
        before, after = {**before, **both}, {**after, **both}
    return dict(before), dict(after)


def holds_exclusive(d: Declared) -> bool:
    return (
        d.type in EXCLUSIVE
        or (d.type == "nebius:index/computeV1Disk:ComputeV1Disk" and d.name.endswith(EXCLUSIVE_NAMES[0]))
        or (d.type == "pulumi-python:dynamic:Resource" and d.name.endswith(EXCLUSIVE_NAMES[1]))
    )


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _changed_paths(before: Declared, after: Declared) -> list[str]:
    keys = sorted(set(before.inputs) | set(after.inputs))
    return [k for k in keys if before.inputs.get(k) != after.inputs.get(k)]


def _replace_paths(d: Declared) -> tuple[str, ...]:
    return tuple(d.replace_on_changes) + REPLACE_ONLY.get(d.type, ())


@dataclass(frozen=True)
class Plan:
    """What `pulumi up` plans going from one render to the next (custom resources only)."""

    created: tuple[Declared, ...]
    deleted: tuple[Declared, ...]
    replaced: tuple[Declared, ...]
    updated: tuple[Declared, ...]

    def summary(self) -> dict[str, list[str]]:
        """action -> sorted `type::name` of what it touches (names without the run id)."""

        def short(ds: Iterable[Declared]) -> list[str]:
            return sorted(f"{d.type.split(':')[-1]}:{d.name.split('drill-')[-1]}" for d in ds)

        return {
            "create": short(self.created),
            "delete": short(self.deleted),
            "replace": short(self.replaced),
            "update": short(self.updated),
        }


def plan(before: Rendered, after: Rendered) -> Plan:
    def custom(r: Rendered) -> list[Declared]:
        return [d for d in r.resources if d.custom and not d.type.startswith("pulumi:providers:")]

    olds = {d.urn: d for d in custom(before)}
    pairs: dict[str, tuple[Declared, Declared]] = {}
    created: list[Declared] = []
    for d in custom(after):
        old = next((olds[u] for u in (d.urn, *d.aliases) if u in olds), None)
        if old is None:
            created.append(d)
        else:
            pairs[old.urn] = (old, d)
    deleted = [d for urn, d in olds.items() if urn not in pairs]
    changed = {urn: _changed_paths(old, new) for urn, (old, new) in pairs.items()}
    replaced: set[str] = set()
    for urn, (old, new) in pairs.items():
        paths = _replace_paths(new)
        everything = "*" in paths and bool(changed[urn])
        if everything or any(_at(old.inputs, p) != _at(new.inputs, p) for p in paths if p != "*"):
            replaced.add(urn)
    grew = True
    while grew:  # what holds the id of a replaced resource under a replace-only property
        grew = False
        ids = [_fake_id(pairs[u][1].type, pairs[u][1].name) for u in replaced]
        for urn, (_old, new) in pairs.items():
            if urn in replaced:
                continue
            held = [json.dumps(_at(new.inputs, p)) for p in _replace_paths(new) if p != "*"]
            if any(i in text for i in ids for text in held):
                replaced.add(urn)
                grew = True
    return Plan(
        created=tuple(created),
        deleted=tuple(deleted),
        replaced=tuple(pairs[u][1] for u in sorted(replaced)),
        updated=tuple(new for urn, (_o, new) in pairs.items() if changed[urn] and urn not in replaced),
    )


def kept_by_destroy_excluding_protected(r: Rendered) -> set[str]:
    """URNs `pulumi destroy --exclude-protected` leaves: the protected resources, their parents,
    their providers and what they depend on, transitively."""
    by_urn = {d.urn: d for d in r.resources}
    kept: set[str] = set()
    todo = [d.urn for d in r.resources if d.protect]
    while todo:
        urn = todo.pop()
        if urn in kept or urn not in by_urn:
            continue
        kept.add(urn)
        d = by_urn[urn]
        todo += [d.parent, d.provider.rsplit("::", 1)[0], *d.depends_on]
    return kept


def outcome(stack: str, changes: Mapping[str, Any]) -> Rendered | RenderError:
    try:
        return render(stack, changes)
    except RenderError as exc:
        return exc
