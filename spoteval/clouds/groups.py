"""Control planes of a pool: the provider's group engine (an AWS Auto Scaling group, an Azure Spot
scale set) operated as one node of the operator.

A pool stack exports the group's name as its one node id and the size the stack declares as
`pool_size`. The group's state reads as one `NodeState`:

- `stopped` when the group is scaled to zero (raw `scaled to zero`);
- `running` when at least one member runs (raw `K of N running`); `details["missing"]` is N - K;
- `pending` (AWS: the group is replacing its members) or `stopped` (Azure: nothing replaces them
  after the spot restore window) when none runs.

`stop()` scales the group to zero through its engine (the GPUs are released; the weights cache of a
pool lives on each member's own disk and goes with it). `start()` sets the group back to the stack's
size: the operator calls it, after reading the price and checking the grant, only where the engine
does not restore the members by itself (`restarts_itself` False). `price_now()` is the single-node
plane's, for the stack's instance type. A pool has no one address and is not preempted on purpose:
restarts are measured on a single-node stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from spoteval.clouds.aws import AwsPlane, _error
from spoteval.clouds.azure import CAPACITY_CODES as AZURE_CAPACITY_CODES
from spoteval.clouds.azure import AzurePlane
from spoteval.clouds.base import (
    CapacityError,
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    StackOutputs,
    wait_for,
)
from spoteval.price import Price
from spoteval.provider_rules import POOL_ENGINES

if TYPE_CHECKING:
    from azure.mgmt.compute import ComputeManagementClient
    from google.cloud import compute_v1

#: Providers whose pool is one group the operator drives through its engine.
GROUP_PROVIDERS: Final = frozenset(POOL_ENGINES)
_AWS: Final = POOL_ENGINES["aws"]
_GCP: Final = POOL_ENGINES["gcp"]
_AZURE: Final = POOL_ENGINES["azure"]


def pool_size(outputs: StackOutputs) -> int:
    """The size the stack declares for its pool (`pool_size` output), 0 for a single node."""
    value = outputs.extra.get("pool_size", 0)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ControlPlaneError(f"outputs.pool_size: must be a whole number >= 0, got {value!r}")
    return value


def group_state(
    desired: int, running: int, size: int, members: Sequence[str], *, engine_restores: bool, unit: str
) -> NodeState:
    """One state for a group of `size` with `desired` members asked of the engine, `running` serving."""
    details: dict[str, Any] = {
        "size": size,
        "desired": desired,
        "running": running,
        "missing": max(0, size - running) if desired > 0 else 0,
        "members": tuple(members),
        "provider_restarts": engine_restores,
    }
    if desired == 0:
        return NodeState("stopped", "scaled to zero", details)
    raw = f"{running} of {size} {unit}"
    if running > 0:
        return NodeState("running", raw, details)
    return NodeState("pending" if engine_restores else "stopped", raw, details)


def _no_address(provider: str, group: str) -> ControlPlaneError:
    return ControlPlaneError(f"{provider} pool {group}: a pool has no one address (each member has its own)")


def _no_preemption(provider: str, group: str) -> ControlPlaneError:
    return ControlPlaneError(
        f"{provider} pool {group}: restarts are measured on a single-node stack (node.count: 1)"
    )


class AwsGroupPlane(AwsPlane):
    """An Auto Scaling group: it replaces a member the provider took, so the operator only watches,
    checks the price its bid caps, and scales it to zero."""

    restarts_itself = _AWS.restores_members
    can_stay_stopped = True
    is_group = True

    def __init__(
        self, outputs: StackOutputs, node: str, config: PlaneOptions, ec2: Any, autoscaling: Any
    ) -> None:
        self.outputs = outputs
        self.node = node
        self.config = config
        self.ec2 = ec2
        self.fis = None
        self.autoscaling = autoscaling
        self.size = pool_size(outputs)

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> AwsGroupPlane:
        import boto3
        from botocore.exceptions import BotoCoreError

        try:
            session = boto3.session.Session(region_name=outputs.region)
            return cls(outputs, node, config, session.client("ec2"), session.client("autoscaling"))
        except BotoCoreError as exc:
            raise ControlPlaneError(f"aws {outputs.region}: cannot create the clients: {exc}") from None

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
            error = CapacityError if code in ("InsufficientInstanceCapacity", "LimitExceeded") else None
            raise (error or ControlPlaneError)(f"aws {what} {self.node}: {_error(exc)}") from None

    def _group(self) -> dict[str, Any]:
        reply = self._call(
            "describe_auto_scaling_groups",
            self.autoscaling.describe_auto_scaling_groups,
            AutoScalingGroupNames=[self.node],
        )
        for group in reply.get("AutoScalingGroups", []):
            if group.get("AutoScalingGroupName") == self.node:
                return dict(group)
        raise ControlPlaneError(f"aws describe_auto_scaling_groups {self.node}: no such group")

    def state(self) -> NodeState:
        group = self._group()
        instances = group.get("Instances", [])
        serving = [i["InstanceId"] for i in instances if i.get("LifecycleState") in _AWS.serving]
        size = self.size or int(group.get("MaxSize", 0))
        desired = int(group.get("DesiredCapacity", 0))
        return group_state(
            desired, len(serving), size, serving, engine_restores=_AWS.restores_members, unit="in service"
        )

    def address(self) -> str | None:
        raise _no_address("aws", self.node)

    def _zone(self) -> str | None:
        return self.outputs.zone

    def _scale(self, what: str, desired: int, timeout_s: float, want: str) -> None:
        self._call(
            what,
            self.autoscaling.update_auto_scaling_group,
            AutoScalingGroupName=self.node,
            MinSize=desired,
            MaxSize=max(desired, self.size),
            DesiredCapacity=desired,
        )
        wait_for(self.state, {want}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=f"aws {what}")

    def stop(self, timeout_s: float) -> None:
        if self.state().stopped:
            return
        self._scale("scale to zero", 0, timeout_s, "stopped")

    def start(self, timeout_s: float) -> None:
        if not self.size:
            raise ControlPlaneError(f"aws pool {self.node}: the stack's outputs give no pool_size")
        self._scale(f"scale to {self.size}", self.size, timeout_s, "running")

    def simulate_preemption(self, timeout_s: float) -> str:
        raise _no_preemption("aws", self.node)


class AzureScaleSetPlane(AzurePlane):
    """A Spot scale set: evicted members are deleted and Azure restores them only within its spot
    restore window, so the operator sets the capacity back to the stack's size (after the price and
    the grant), and to zero when the run is done."""

    restarts_itself = _AZURE.restores_members
    can_stay_stopped = True
    is_group = True

    def __init__(
        self, outputs: StackOutputs, node: str, config: PlaneOptions, compute: ComputeManagementClient
    ) -> None:
        super().__init__(outputs, node.rsplit("/", 1)[-1], config, compute)
        self.node = node
        self.size = pool_size(outputs)

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> AzureScaleSetPlane:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient

        plane = AzurePlane.connect(outputs, node, config)
        compute = ComputeManagementClient(DefaultAzureCredential(), plane.subscription)
        return cls(outputs, node, config, compute)

    def _fail_call(self, verb: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

        try:
            return fn(*args, **kwargs)
        except ResourceNotFoundError:
            raise ControlPlaneError(f"azure {verb} {self.group}/{self.name}: no such scale set") from None
        except AzureError as exc:
            failure = self._fail(verb, exc)
            code = getattr(getattr(exc, "error", None), "code", None)
            if isinstance(exc, HttpResponseError) and code in AZURE_CAPACITY_CODES:
                raise CapacityError(f"{failure} ({code})") from None
            raise failure from None

    def state(self) -> NodeState:
        sets = self.compute.virtual_machine_scale_sets
        scale_set = self._fail_call("get", sets.get, self.group, self.name)
        desired = int(scale_set.sku.capacity or 0) if scale_set.sku else 0
        vms = self._fail_call(
            "list instances",
            lambda: list(
                self.compute.virtual_machine_scale_set_vms.list(self.group, self.name, expand="instanceView")
            ),
        )
        running: list[str] = []
        for vm in vms:
            view = vm.instance_view
            codes = [s.code or "" for s in (view.statuses or [])] if view else []
            if _AZURE.serving & set(codes):
                running.append(str(vm.name or vm.instance_id))
        size = self.size or desired
        return group_state(
            desired, len(running), size, running, engine_restores=_AZURE.restores_members, unit="running"
        )

    def address(self) -> str | None:
        raise _no_address("azure", self.node)

    def _capacity(self, verb: str, capacity: int, timeout_s: float, want: str) -> None:
        from azure.mgmt.compute.models import Sku, VirtualMachineScaleSetUpdate

        sets = self.compute.virtual_machine_scale_sets
        current = self._fail_call("get", sets.get, self.group, self.name)
        sku = Sku(name=current.sku.name, tier=current.sku.tier, capacity=capacity)
        poller = self._fail_call(
            verb, sets.begin_update, self.group, self.name, VirtualMachineScaleSetUpdate(sku=sku)
        )
        self._fail_call(verb, poller.result, timeout=timeout_s)
        wait_for(
            self.state,
            {want},
            timeout_s=timeout_s,
            poll_s=self.config.poll_s,
            what=f"azure {verb} {self.group}/{self.name}",
        )

    def stop(self, timeout_s: float) -> None:
        if self.state().stopped and self.state().details.get("desired") == 0:
            return
        self._capacity("scale to zero", 0, timeout_s, "stopped")

    def start(self, timeout_s: float) -> None:
        if not self.size:
            raise ControlPlaneError(f"azure pool {self.node}: the stack's outputs give no pool_size")
        self._capacity(f"scale to {self.size}", self.size, timeout_s, "running")

    def simulate_preemption(self, timeout_s: float) -> str:
        raise _no_preemption("azure", self.node)


class GcpMigPlane:
    """A regional managed instance group: it recreates the members the provider took, so the operator
    only watches, checks the price, and resizes it to zero. The price is a running member's (its
    machine type and GPUs, from the Billing Catalog), or the configured one when none runs."""

    provider = "gcp"
    restarts_itself = _GCP.restores_members
    can_stay_stopped = True
    is_group = True

    def __init__(
        self,
        outputs: StackOutputs,
        node: str,
        config: PlaneOptions,
        groups: compute_v1.RegionInstanceGroupManagersClient,
        member_plane: Callable[[str], Any],
    ) -> None:
        import os

        from spoteval.clouds.gcp import GcpOptions

        self.outputs = outputs
        self.node = node
        self.config = config
        self.groups = groups
        self.member_plane = member_plane  # a member's path -> its GcpPlane (for the price)
        self.size = pool_size(outputs)
        self.name = node.rsplit("/", 1)[-1]
        project = GcpOptions.parse(config).project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        if not project:
            raise ControlPlaneError(
                f"gcp pool {node!r}: give the project (gcp.project or GOOGLE_CLOUD_PROJECT)"
            )
        self.project = project

    @classmethod
    def connect(cls, outputs: StackOutputs, node: str, config: PlaneOptions) -> GcpMigPlane:
        from google.cloud import compute_v1

        from spoteval.clouds.gcp import GcpPlane

        try:
            groups = compute_v1.RegionInstanceGroupManagersClient()
        except Exception as exc:  # auth or transport set-up: one line
            raise ControlPlaneError(f"gcp: cannot create the instance groups client: {exc}") from None
        return cls(outputs, node, config, groups, lambda path: GcpPlane.connect(outputs, path, config))

    def _call(self, verb: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        from spoteval.clouds.gcp import CAPACITY_CODES

        where = f"{self.project}/{self.outputs.region}/{self.name}"
        try:
            return fn(
                project=self.project, region=self.outputs.region, instance_group_manager=self.name, **kwargs
            )
        except gexc.NotFound:
            raise ControlPlaneError(f"gcp {verb} {where}: no such instance group") from None
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            capacity = any(code in str(exc) for code in CAPACITY_CODES)
            raise (CapacityError if capacity else ControlPlaneError)(f"gcp {verb} {where}: {exc}") from None

    def _members(self) -> list[tuple[str, str]]:
        """(member path projects/P/zones/Z/instances/N, its status) for every managed instance."""
        out = []
        for managed in self._call("list_managed_instances", self.groups.list_managed_instances):
            url = str(managed.instance or "")
            path = url[url.find("projects/") :] if "projects/" in url else url
            out.append((path, str(managed.instance_status or "")))
        return out

    def state(self) -> NodeState:
        group = self._call("get", self.groups.get)
        desired = int(group.target_size or 0)
        running = [path.rsplit("/", 1)[-1] for path, status in self._members() if status in _GCP.serving]
        return group_state(
            desired,
            len(running),
            self.size or desired,
            running,
            engine_restores=self.restarts_itself,
            unit="running",
        )

    def address(self) -> str | None:
        raise _no_address("gcp", self.node)

    def price_now(self) -> Price:
        from spoteval.clouds.base import configured_price

        for path, status in self._members():
            if status in _GCP.serving:
                price: Price = self.member_plane(path).price_now()
                return price
        return configured_price(self.config, reason="no member of the group runs to read its machine from")

    def _resize(self, verb: str, size: int, timeout_s: float, want: str) -> None:
        operation = self._call(verb, self.groups.resize, size=size)
        try:
            operation.result(timeout=timeout_s)
        except TimeoutError:
            raise ControlPlaneError(
                f"gcp {verb} {self.name}: the operation did not finish in {timeout_s:g} s"
            ) from None
        wait_for(
            self.state, {want}, timeout_s=timeout_s, poll_s=self.config.poll_s, what=f"gcp {verb} {self.name}"
        )

    def stop(self, timeout_s: float) -> None:
        if self.state().details.get("desired") == 0:
            return
        self._resize("resize to zero", 0, timeout_s, "stopped")

    def start(self, timeout_s: float) -> None:
        if not self.size:
            raise ControlPlaneError(f"gcp pool {self.node}: the stack's outputs give no pool_size")
        self._resize(f"resize to {self.size}", self.size, timeout_s, "running")

    def simulate_preemption(self, timeout_s: float) -> str:
        raise _no_preemption("gcp", self.node)


__all__ = [
    "GROUP_PROVIDERS",
    "AwsGroupPlane",
    "AzureScaleSetPlane",
    "GcpMigPlane",
    "group_state",
    "pool_size",
]
