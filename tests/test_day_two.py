"""Day two of every stack: each workflow of the README's "Day two" table rendered under the mock engine
before and after (stop the node = count 0, resume = count 1, pool = count 2, flip market, static
address, destroy keeping the holds, destroy everything), and what `pulumi up` would plan compared
(tests/day_two_kit.py): no hold (protected or retained) is ever deleted or replaced, whatever holds
an exclusive attachment is replaced delete-first, Kubernetes workloads skip the await, and what a
provider cannot do is refused naming the key before anything is declared."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from components.mocks import Declared, Rendered, RenderError
from tests.day_two_kit import (
    STACKS,
    WORKFLOWS,
    holds_exclusive,
    kept_by_destroy_excluding_protected,
    outcome,
    plan,
    workflow_changes,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CASES = [(stack, workflow) for stack in sorted(STACKS) for workflow in WORKFLOWS]

#: (stack, workflow) -> the key the refusal names
REFUSED = {
    ("nebius-eu-north1", "pool"): "node.count",
    ("runpod-eu", "pool"): "node.count",
    ("runpod-eu", "flip market"): "node.market",
    ("runpod-eu", "static address"): "node.address",
}

#: (stack, workflow) -> what is replaced (delete-first), and the compute deleted and created
PLANNED: dict[tuple[str, str], dict[str, list[str]]] = {
    ("aws-us-east-1", "stop the node"): {
        "replace": [],
        "delete": ["Instance:aws-gpu", "LaunchTemplate:aws-template", "VolumeAttachment:aws-weights-cache"],
        "create": [],
    },
    ("aws-us-east-1", "resume"): {
        "replace": [],
        "delete": [],
        "create": ["Instance:aws-gpu", "LaunchTemplate:aws-template", "VolumeAttachment:aws-weights-cache"],
    },
    ("aws-us-east-1", "pool"): {
        "replace": [],
        "delete": ["Instance:aws-gpu", "LaunchTemplate:aws-template", "VolumeAttachment:aws-weights-cache"],
        "create": ["Group:aws-group", "LaunchTemplate:aws-template"],
    },
    ("aws-us-east-1", "flip market"): {
        "replace": ["Instance:aws-gpu", "VolumeAttachment:aws-weights-cache"],
        "delete": [],
        "create": [],
    },
    ("aws-us-east-1", "static address"): {"replace": [], "delete": [], "create": ["Eip:aws-address"]},
    # the static public IP stays while the node is stopped
    ("azure-eastus", "stop the node"): {
        "replace": [],
        "delete": ["NetworkInterface:azure-nic", "VirtualMachine:azure-gpu"],
        "create": [],
    },
    ("azure-eastus", "resume"): {
        "replace": [],
        "delete": [],
        "create": ["NetworkInterface:azure-nic", "VirtualMachine:azure-gpu"],
    },
    ("azure-eastus", "pool"): {
        "replace": [],
        "delete": ["NetworkInterface:azure-nic", "PublicIPAddress:azure-address", "VirtualMachine:azure-gpu"],
        "create": ["VirtualMachineScaleSet:azure-gpu"],
    },
    ("azure-eastus", "flip market"): {"replace": ["VirtualMachine:azure-gpu"], "delete": [], "create": []},
    # a single Azure VM's address is static already: nothing to do
    ("azure-eastus", "static address"): {"replace": [], "delete": [], "create": []},
    ("gcp-us-central1", "stop the node"): {"replace": [], "delete": ["Instance:gcp-gpu"], "create": []},
    ("gcp-us-central1", "resume"): {"replace": [], "delete": [], "create": ["Instance:gcp-gpu"]},
    ("gcp-us-central1", "pool"): {
        "replace": [],
        "delete": ["Instance:gcp-gpu"],
        "create": ["InstanceTemplate:gcp-template", "RegionInstanceGroupManager:gcp-group"],
    },
    ("gcp-us-central1", "flip market"): {"replace": ["Instance:gcp-gpu"], "delete": [], "create": []},
    ("gcp-us-central1", "static address"): {"replace": [], "delete": [], "create": ["Address:gcp-address"]},
    ("k8s-gke", "stop the node"): {
        "replace": [],
        "delete": ["Deployment:gke-server", "Job:gke-episodes", "Service:gke-server"],
        "create": [],
    },
    ("k8s-gke", "resume"): {
        "replace": [],
        "delete": [],
        "create": ["Deployment:gke-server", "Job:gke-episodes", "Service:gke-server"],
    },
    ("k8s-gke", "pool"): {
        # the agent's config gains its `pool` section (claims, the model server to scale to zero)
        "replace": ["ConfigMap:gke-agent", "Job:gke-episodes"],
        "delete": [],
        "create": ["PersistentVolumeClaim:gke-agent-spool-shared"],
    },
    ("k8s-gke", "flip market"): {
        "replace": ["ConfigMap:gke-agent", "Job:gke-episodes"],
        "delete": [],
        "create": [],
    },
    # the model server's Service address is stable already: nothing to do
    ("k8s-gke", "static address"): {"replace": [], "delete": [], "create": []},
    ("nebius-eu-north1", "stop the node"): {
        "replace": [],
        "delete": ["ComputeV1Disk:nebius-boot", "ComputeV1Instance:nebius-vm"],
        "create": [],
    },
    ("nebius-eu-north1", "resume"): {
        "replace": [],
        "delete": [],
        "create": ["ComputeV1Disk:nebius-boot", "ComputeV1Instance:nebius-vm"],
    },
    ("nebius-eu-north1", "flip market"): {
        "replace": ["ComputeV1Instance:nebius-vm"],
        "delete": [],
        "create": [],
    },
    # the VM's public address becomes static in place (an update of the VM, not a replacement)
    ("nebius-eu-north1", "static address"): {"replace": [], "delete": [], "create": []},
    ("runpod-eu", "stop the node"): {"replace": [], "delete": ["Resource:runpod-pod"], "create": []},
    ("runpod-eu", "resume"): {"replace": [], "delete": [], "create": ["Resource:runpod-pod"]},
}

#: what runs compute (or holds it): what a stop deletes and `destroy --exclude-protected` removes
COMPUTE = frozenset(
    {
        "Instance",
        "LaunchTemplate",
        "VolumeAttachment",
        "Group",
        "Eip",
        "Address",
        "InstanceTemplate",
        "RegionInstanceGroupManager",
        "VirtualMachine",
        "VirtualMachineScaleSet",
        "NetworkInterface",
        "PublicIPAddress",
        "Deployment",
        "Job",
        "Service",
        "ComputeV1Instance",
    }
)

#: stack -> custom resources `pulumi destroy --exclude-protected` leaves (type:name without the run)
KEPT_BY_DESTROY = {
    "aws-us-east-1": [
        "BucketOwnershipControls:aws-ownership",
        "BucketPolicy:aws-tls-only",
        "BucketPublicAccessBlock:aws-public-access",
        "BucketServerSideEncryptionConfiguration:aws-encryption",
        "BucketVersioning:aws-versioning",
        "Bucket:aws-results",
        "LogGroup:aws-events",
        "Volume:aws-weights-cache",
        "aws:qwen7b-drill-aws-aws",
    ],
    "azure-eastus": [
        "BlobContainer:azure-container",
        "BlobServiceProperties:azure-versioning",
        "Disk:azure-weights-cache",
        "ResourceGroup:azure-group",
        "StorageAccount:azure-results",
        "azure-native:qwen3b-drill-azure-azure",
    ],
    "gcp-us-central1": [
        "Bucket:gcp-results",
        "Disk:gcp-weights-cache",
        "ProjectBucketConfig:gcp-events",
        "gcp:qwen7b-drill-gcp-gcp",
    ],
    "k8s-gke": [
        "Namespace:gke-namespace",
        "PersistentVolumeClaim:gke-agent-spool",
        "PersistentVolumeClaim:gke-weights-cache",
        "kubernetes:qwen7b-drill-gke-k8s",
    ],
    # the bucket's policy names the node's group: the group stays with it
    "nebius-eu-north1": [
        "ComputeV1Disk:nebius-cache",
        "IamV1Group:nebius-group",
        "StorageV1Bucket:nebius-bucket",
        "nebius:nebius",
    ],
    "runpod-eu": ["Resource:runpod-weights"],
}


def is_compute(d: Declared) -> bool:
    return d.type.split(":")[-1] in COMPUTE or holds_exclusive(d)


def short(d: Declared) -> str:
    return f"{d.type.split(':')[-1]}:{d.name.split('drill-')[-1]}"


@functools.cache
def rendered(stack: str, changes: tuple[tuple[str, Any], ...]) -> Rendered | RenderError:
    return outcome(stack, dict(changes))


def sides(stack: str, workflow: str) -> tuple[Rendered | RenderError, Rendered | RenderError]:
    before, after = workflow_changes(stack, workflow)
    return rendered(stack, tuple(sorted(before.items()))), rendered(stack, tuple(sorted(after.items())))


def both(stack: str, workflow: str) -> tuple[Rendered, Rendered]:
    before, after = sides(stack, workflow)
    assert isinstance(before, Rendered) and isinstance(after, Rendered), (before, after)
    return before, after


def test_every_stack_and_workflow_is_either_planned_or_refused() -> None:
    assert not set(PLANNED) & set(REFUSED)
    assert sorted([*PLANNED, *REFUSED]) == sorted(CASES)
    assert len(CASES) == 30


@pytest.mark.parametrize(("stack", "workflow"), sorted(REFUSED))
def test_a_workflow_the_provider_cannot_do_is_refused_naming_the_key(stack: str, workflow: str) -> None:
    before, after = sides(stack, workflow)
    assert isinstance(before, Rendered)  # the stack as it is renders
    assert isinstance(after, RenderError)
    assert str(after).startswith(f"stack config spot-eval:{REFUSED[stack, workflow]}: ")
    assert "\n" not in str(after)


@pytest.mark.parametrize(("stack", "workflow"), sorted(PLANNED))
def test_no_workflow_deletes_or_replaces_a_hold(stack: str, workflow: str) -> None:
    before, after = both(stack, workflow)
    p = plan(before, after)
    held_before = [d for d in before.resources if d.custom and (d.protect or d.retain_on_delete)]
    assert held_before  # every stack has holds
    assert [short(d) for d in p.deleted if d.protect or d.retain_on_delete] == []
    assert [short(d) for d in p.replaced if d.protect or d.retain_on_delete] == []
    # each hold is still declared afterwards, with the same identity (its URN, or an alias of it)
    after_ids = {u for d in after.resources for u in (d.urn, *d.aliases)}
    assert [short(d) for d in held_before if d.urn not in after_ids] == []
    assert all(
        d.protect and d.retain_on_delete for d in after.resources if d.urn in {h.urn for h in held_before}
    )


@pytest.mark.parametrize(("stack", "workflow"), sorted(PLANNED))
def test_what_pulumi_up_plans_for_each_workflow(stack: str, workflow: str) -> None:
    before, after = both(stack, workflow)
    p = plan(before, after)
    compute = {
        "replace": sorted(short(d) for d in p.replaced),
        "delete": sorted(short(d) for d in p.deleted if is_compute(d)),
        "create": sorted(short(d) for d in p.created if is_compute(d) or d.protect),
    }
    assert compute == PLANNED[stack, workflow]
    # what is replaced and holds an exclusive attachment goes delete-first
    assert all(d.delete_before_replace for d in p.replaced if d.type != "kubernetes:core/v1:ConfigMap")


@pytest.mark.parametrize(
    ("stack", "address"),
    [
        ("aws-us-east-1", "Eip:aws-address"),
        ("gcp-us-central1", "Address:gcp-address"),
        ("azure-eastus", "PublicIPAddress:azure-address"),
    ],
)
def test_a_static_address_stays_while_the_node_is_stopped(stack: str, address: str) -> None:
    static = (("node__address", "static"),)
    running = rendered(stack, static)
    stopped = rendered(stack, (("node__address", "static"), ("node__count", 0)))
    assert isinstance(running, Rendered) and isinstance(stopped, Rendered)
    kinds = ("Eip", "Address", "PublicIPAddress")
    assert [short(d) for d in running.resources if d.type.split(":")[-1] in kinds] == [address]
    assert [short(d) for d in stopped.resources if d.type.split(":")[-1] in kinds] == [address]
    p = plan(running, stopped)
    assert [short(d) for d in p.deleted if d.type.split(":")[-1] in kinds] == []
    assert stopped.outputs["address_kind"] == "static" and stopped.outputs["node_ids"] == []


def _all_renders() -> list[tuple[str, Rendered]]:
    out: list[tuple[str, Rendered]] = []
    for stack, workflow in sorted(PLANNED):
        before, after = both(stack, workflow)
        out += [(stack, before), (stack, after)]
    return out


def test_every_exclusive_holder_is_replaced_delete_first_in_every_configuration() -> None:
    seen: dict[str, set[str]] = {}
    for stack, r in _all_renders():
        for d in r.resources:
            if holds_exclusive(d):
                assert d.delete_before_replace, (stack, d.type, d.name)
                seen.setdefault(stack, set()).add(short(d))
    assert seen == {
        "aws-us-east-1": {"Instance:aws-gpu", "VolumeAttachment:aws-weights-cache"},
        "azure-eastus": {"NetworkInterface:azure-nic", "VirtualMachine:azure-gpu"},
        "gcp-us-central1": {"Instance:gcp-gpu"},
        "k8s-gke": {"Deployment:gke-server", "Job:gke-episodes"},
        "nebius-eu-north1": {"ComputeV1Disk:nebius-boot", "ComputeV1Instance:nebius-vm"},
        "runpod-eu": {"Resource:runpod-pod"},
    }


def test_what_the_api_refuses_to_change_is_replaced_instead() -> None:
    azure = rendered("azure-eastus", ())
    assert isinstance(azure, Rendered)
    assert azure.one("azure-native:compute:VirtualMachine").replace_on_changes == (
        "priority",
        "evictionPolicy",
    )
    pool = rendered("azure-eastus", (("node__count", 2),))
    assert isinstance(pool, Rendered)
    scale_set = pool.one("azure-native:compute:VirtualMachineScaleSet")
    assert scale_set.replace_on_changes == (
        "virtualMachineProfile.priority",
        "virtualMachineProfile.evictionPolicy",
    )
    assert scale_set.delete_before_replace
    nebius = rendered("nebius-eu-north1", ())
    assert isinstance(nebius, Rendered)
    assert nebius.one("nebius:index/computeV1Instance:ComputeV1Instance").replace_on_changes == (
        "preemptible",
    )


def test_kubernetes_workloads_do_not_make_pulumi_up_wait_for_the_run() -> None:
    workloads = 0
    for stack, r in _all_renders():
        if stack != "k8s-gke":
            continue
        for d in r.resources:
            if d.type in ("kubernetes:batch/v1:Job", "kubernetes:apps/v1:Deployment"):
                assert d.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}, d.name
                workloads += 1
    assert workloads == 16  # Job and Deployment in the 8 renders that have a node


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_destroy_keeping_the_holds_removes_all_compute(stack: str) -> None:
    r = rendered(stack, ())
    assert isinstance(r, Rendered)
    kept = kept_by_destroy_excluding_protected(r)
    custom = sorted(
        short(d) if d.type.split(":")[0] != "pulumi" else d.type.split(":")[-1] + ":" + d.name
        for d in r.resources
        if d.urn in kept and d.custom
    )
    assert custom == sorted(KEPT_BY_DESTROY[stack])
    assert not [c for c in custom if c.split(":")[0] in COMPUTE]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_destroy_everything_leaves_every_hold_in_the_account(stack: str) -> None:
    """`pulumi state unprotect --all` then `pulumi destroy`: what is retained on delete is only
    dropped from the stack; every protected resource is retained, nothing else is."""
    r = rendered(stack, ())
    assert isinstance(r, Rendered)
    protected = [d for d in r.resources if d.protect]
    retained = [d for d in r.resources if d.retain_on_delete]
    assert protected and protected == retained
