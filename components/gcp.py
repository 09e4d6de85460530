"""GCP: GCS result bucket with holds, node service account, VPC, the Spot GPU VM (or a regional managed
instance group), stop rules and a log sink of preemptions. One explicit provider, built in `provider()`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pulumi
import pulumi_gcp as gcp
from pulumi_gcp import billing, compute, logging, serviceaccount, storage

from components import pool_stop
from components.base import BuildContext, StackOutputs, child, held
from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.holds import exclusive, held_moved, moved_from
from components.privilege import GCS_CONDITION_TITLES, gcs_condition
from components.settings import CommonKeyRules, Settings, SettingsError, SettingsReader, cidr
from components.startup import render_shutdown_script, render_startup_script
from spoteval.providers import gcp as gcp_facts

CACHE_DEVICE_NAME: Final = "spot-eval-cache"
#: machine type families that come with their GPUs attached (no guest accelerators to add)
GPU_MACHINE_FAMILIES: Final = ("a2-", "a3-", "a4-", "g2-", "g4-")
SCOPES: Final = ["https://www.googleapis.com/auth/cloud-platform"]

# --- the stack config: rules for the common keys, the `gcp:` block -----------------------------


def _zone_problem(region: str, zone: str) -> str | None:
    return (
        None
        if re.fullmatch(re.escape(region) + gcp_facts.REGIONS.zone_suffix, zone)
        else f"{zone!r} is not a zone of {region}"
    )


#: the keys every stack has, as GCP names them: the node's disks live in one zone
COMMON_RULES: Final = CommonKeyRules(
    region=re.compile(gcp_facts.REGIONS.region), zone=_zone_problem, zone_required=True
)
SETTINGS_KEYS: Final = frozenset({"project", "billing_account", "subnet_cidr"})
_PROJECT: Final = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_BILLING_ACCOUNT: Final = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")


@dataclass(frozen=True)
class GcpSettings:
    project: str
    billing_account: str | None = None
    subnet_cidr: str = "10.42.0.0/20"


def parse_settings(block: SettingsReader) -> GcpSettings:
    block.reject_unknown(SETTINGS_KEYS)
    project = block.string("project")
    if not _PROJECT.match(project):
        raise SettingsError("gcp.project", f"{project!r} is not a project id")
    billing = block.opt_string("billing_account")
    if billing is not None and not _BILLING_ACCOUNT.match(billing):
        raise SettingsError(
            "gcp.billing_account", f"{billing!r} is not a billing account id (XXXXXX-XXXXXX-XXXXXX)"
        )
    return GcpSettings(
        project=project,
        billing_account=billing,
        subnet_cidr=cidr(block.string("subnet_cidr", "10.42.0.0/20"), "gcp.subnet_cidr"),
    )


def own(settings: Settings) -> GcpSettings:
    return settings.block_of(GcpSettings)


def provider(settings: Settings) -> gcp.Provider:
    """The stack's one GCP provider: project, region and zone passed explicitly, resources labelled."""
    return gcp.Provider(
        f"{settings.run_id}-gcp",
        project=own(settings).project,
        region=settings.region,
        zone=settings.zone,
        default_labels=settings.tags,
    )


def has_builtin_gpus(machine_type: str) -> bool:
    return machine_type.startswith(GPU_MACHINE_FAMILIES)


# --- result bucket ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreArgs:
    region: str
    bundle_path: Path
    manifest_path: Path | None


class Store(pulumi.ComponentResource):
    """GCS bucket: uniform access, public access prevention enforced, versioned (Google-managed
    encryption at rest), never deleted by Pulumi; plus the agent bundle object."""

    def __init__(self, name: str, args: StoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:Store", name, None, opts)
        self.bucket = storage.Bucket(
            f"{name}-results",
            location=args.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=storage.BucketVersioningArgs(enabled=True),
            force_destroy=False,
            opts=held(self),
        )
        self.bundle = storage.BucketObject(
            f"{name}-agent-bundle",
            bucket=self.bucket.name,
            name=OBJECT_KEY,
            source=pulumi.FileAsset(str(args.bundle_path)),
            content_type="application/zip",
            opts=child(self),
        )
        self.manifest: storage.BucketObject | None = None
        if args.manifest_path is not None:
            self.manifest = storage.BucketObject(
                f"{name}-manifest",
                bucket=self.bucket.name,
                name=MANIFEST_KEY,
                source=pulumi.FileAsset(str(args.manifest_path)),
                content_type="application/jsonl",
                opts=child(self),
            )
        self.url = pulumi.Output.concat("gs://", self.bucket.name)
        self.register_outputs({"bucket_url": self.url})


# --- identity -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdentityArgs:
    run_id: str
    bucket: pulumi.Input[str]


class Identity(pulumi.ComponentResource):
    """The node's service account (components/privilege.py): create objects under its run's prefix
    (no overwrite, no delete), read the agent bundle and its run, list the bucket. The agent reads
    prices from the configured workload prices, so it needs no billing access."""

    def __init__(self, name: str, args: IdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:Identity", name, None, opts)
        self.account = serviceaccount.Account(
            f"{name}-node",
            account_id=f"se-{args.run_id}"[:30].rstrip("-"),
            display_name=f"spot-eval node ({args.run_id})",
            opts=child(self),
        )
        member = pulumi.Output.concat("serviceAccount:", self.account.email)
        bucket = pulumi.Output.from_input(args.bucket)
        self.members = [
            storage.BucketIAMMember(
                f"{name}-{role.split('.')[-1].lower()}",
                bucket=args.bucket,
                role=role,
                member=member,
                condition=storage.BucketIAMMemberConditionArgs(
                    title=GCS_CONDITION_TITLES[role],
                    expression=bucket.apply(functools.partial(gcs_condition, role=role, run_id=args.run_id)),
                ),
                opts=child(self),
            )
            for role in ("roles/storage.objectViewer", "roles/storage.objectCreator")
        ]
        self.register_outputs({"email": self.account.email})


# --- network ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkArgs:
    region: str
    subnet_cidr: str
    ingress_cidrs: tuple[str, ...]
    server_port: int
    static_address: bool


class Network(pulumi.ComponentResource):
    """A VPC with one regional subnet; ingress only to the model server port from the listed CIDRs."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:Network", name, None, opts)
        self.network = compute.Network(f"{name}-vpc", auto_create_subnetworks=False, opts=child(self))
        self.subnet = compute.Subnetwork(
            f"{name}-subnet",
            network=self.network.id,
            region=args.region,
            ip_cidr_range=args.subnet_cidr,
            private_ip_google_access=True,
            opts=child(self),
        )
        if args.ingress_cidrs:
            compute.Firewall(
                f"{name}-model-server",
                network=self.network.id,
                direction="INGRESS",
                source_ranges=list(args.ingress_cidrs),
                target_tags=["spot-eval-node"],
                allows=[compute.FirewallAllowArgs(protocol="tcp", ports=[str(args.server_port)])],
                opts=child(self),
            )
        self.address: compute.Address | None = None
        if args.static_address:
            self.address = compute.Address(
                f"{name}-address", region=args.region, address_type="EXTERNAL", opts=child(self)
            )
        self.register_outputs({"subnet": self.subnet.id})


# --- the node -----------------------------------------------------------------------------------


class WeightsCache(pulumi.ComponentResource):
    """The weights-cache disk, declared whatever `node.count`, `node.market` or pool mode: stopping,
    resizing, switching to a pool or flipping the market never plans its deletion. It was a child of
    the Node component; the alias keeps its identity (no replacement of an existing stack's disk).
    A pool leaves it unattached (pool VMs cache weights on their own boot disk)."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:WeightsCache", name, None, opts)
        disk = f"{name}-weights-cache"
        self.disk = compute.Disk(
            disk,
            zone=settings.zone,
            size=settings.node.cache_disk_gb,
            type="pd-balanced",
            opts=held_moved(self, aliases=[moved_from("spot-eval:gcp:Node", "gcp:compute/disk:Disk", disk)]),
        )
        self.register_outputs({"disk": self.disk.id})


@dataclass(frozen=True)
class NodeArgs:
    settings: Settings
    store_url: pulumi.Input[str]
    subnet: pulumi.Input[str]
    service_account: pulumi.Input[str]
    nat_ip: pulumi.Input[str] | None
    cache_disk: pulumi.Input[str] = ""


def _max_run(settings: Settings) -> int | None:
    return settings.stop.max_runtime_s


class Node(pulumi.ComponentResource):
    """One GPU VM: Spot provisioning that stops (keeps its disks) on preemption, never restarted
    automatically, a built-in max run duration, the weights-cache disk (components WeightsCache)
    attached, and a shutdown script that signals the agent. Replaced delete-first: the disk attaches
    read-write to one VM at a time, and the market (`scheduling.provisioning_model`) is replace-only."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:Node", name, None, opts)
        s = args.settings
        node = s.node
        assert s.zone is not None
        startup = pulumi.Output.from_input(args.store_url).apply(
            lambda url: render_startup_script(
                s, store_url=url, cache_device=f"/dev/disk/by-id/google-{CACHE_DEVICE_NAME}"
            )
        )
        max_run = _max_run(s)
        self.instance = compute.Instance(
            f"{name}-gpu",
            zone=s.zone,
            machine_type=node.instance_type,
            boot_disk=compute.InstanceBootDiskArgs(
                auto_delete=True,
                initialize_params=compute.InstanceBootDiskInitializeParamsArgs(
                    image=node.image, size=node.root_disk_gb, type="pd-balanced"
                ),
            ),
            attached_disks=[
                compute.InstanceAttachedDiskArgs(source=args.cache_disk, device_name=CACHE_DEVICE_NAME)
            ],
            guest_accelerators=None
            if has_builtin_gpus(node.instance_type)
            else [compute.InstanceGuestAcceleratorArgs(type=node.gpu_type, count=node.gpu_count)],
            scheduling=compute.InstanceSchedulingArgs(
                provisioning_model="SPOT" if node.spot else "STANDARD",
                preemptible=node.spot,
                # Spot VMs are never restarted by GCP; an on-demand VM comes back after a host error.
                automatic_restart=not node.spot,
                on_host_maintenance="TERMINATE",
                instance_termination_action="STOP" if (node.spot or max_run is not None) else None,
                max_run_duration=None
                if max_run is None
                else compute.InstanceSchedulingMaxRunDurationArgs(seconds=max_run),
            ),
            network_interfaces=[
                compute.InstanceNetworkInterfaceArgs(
                    subnetwork=args.subnet,
                    access_configs=[compute.InstanceNetworkInterfaceAccessConfigArgs(nat_ip=args.nat_ip)],
                )
            ],
            service_account=compute.InstanceServiceAccountArgs(email=args.service_account, scopes=SCOPES),
            metadata={
                "startup-script": startup,
                "shutdown-script": render_shutdown_script(s),
                "enable-oslogin": "TRUE",
            },
            tags=["spot-eval-node"],
            allow_stopping_for_update=True,
            deletion_protection=False,
            opts=exclusive(self),
        )
        self.node_ids = self.instance.name.apply(lambda n: [n])
        self.register_outputs({"node_ids": self.node_ids})


class Pool(pulumi.ComponentResource):
    """Several GPU VMs: an instance template and a regional managed instance group. Preempted Spot
    VMs are deleted and recreated by the group (a group cannot restart stopped VMs)."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:Pool", name, None, opts)
        s = args.settings
        node = s.node
        startup = pulumi.Output.from_input(args.store_url).apply(
            lambda url: render_startup_script(s, store_url=url, cache_device=None)
        )
        max_run = _max_run(s)
        self.template = compute.InstanceTemplate(
            f"{name}-template",
            machine_type=node.instance_type,
            disks=[
                compute.InstanceTemplateDiskArgs(
                    boot=True,
                    auto_delete=True,
                    source_image=node.image,
                    disk_size_gb=node.root_disk_gb + node.cache_disk_gb,
                    disk_type="pd-balanced",
                )
            ],
            guest_accelerators=None
            if has_builtin_gpus(node.instance_type)
            else [compute.InstanceTemplateGuestAcceleratorArgs(type=node.gpu_type, count=node.gpu_count)],
            scheduling=compute.InstanceTemplateSchedulingArgs(
                provisioning_model="SPOT" if node.spot else "STANDARD",
                preemptible=node.spot,
                # Spot VMs are never restarted by GCP; an on-demand VM comes back after a host error.
                automatic_restart=not node.spot,
                on_host_maintenance="TERMINATE",
                instance_termination_action="DELETE" if (node.spot or max_run is not None) else None,
                max_run_duration=None
                if max_run is None
                else compute.InstanceTemplateSchedulingMaxRunDurationArgs(seconds=max_run),
            ),
            network_interfaces=[
                compute.InstanceTemplateNetworkInterfaceArgs(
                    subnetwork=args.subnet,
                    access_configs=[compute.InstanceTemplateNetworkInterfaceAccessConfigArgs()],
                )
            ],
            service_account=compute.InstanceTemplateServiceAccountArgs(
                email=args.service_account, scopes=SCOPES
            ),
            metadata={
                "startup-script": startup,
                "shutdown-script": render_shutdown_script(s),
                "enable-oslogin": "TRUE",
            },
            tags=["spot-eval-node"],
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=False),
        )
        self.group = compute.RegionInstanceGroupManager(
            f"{name}-group",
            name=pool_stop.group_name(s),
            region=s.region,
            base_instance_name=f"{s.run_id}-gpu",
            versions=[
                compute.RegionInstanceGroupManagerVersionArgs(
                    instance_template=self.template.self_link_unique
                )
            ],
            target_size=node.count,
            update_policy=compute.RegionInstanceGroupManagerUpdatePolicyArgs(
                type="PROACTIVE",
                minimal_action="REPLACE",
                instance_redistribution_type="NONE",
                max_surge_fixed=0,
                max_unavailable_fixed=3,
            ),
            opts=child(self),
        )
        self.node_ids = self.group.name.apply(lambda n: [n])
        self.register_outputs({"node_ids": self.node_ids})


# --- stop rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopRulesArgs:
    settings: Settings


class StopRules(pulumi.ComponentResource):
    """Budget: a billing budget on this project's spend (needs `gcp.billing_account`), alerting the
    billing account's admins at 80 % and 100 %. Max runtime is the VM's own `max_run_duration`;
    idle and done are the agent's; GCP Spot has no bid, so the price cap is checked by the agent."""

    def __init__(self, name: str, args: StopRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:StopRules", name, None, opts)
        s = args.settings
        if s.grant.budget is not None and own(s).billing_account is not None:
            units, nanos = divmod(round(s.grant.budget * 1e9), 10**9)
            project = gcp.organizations.get_project_output(
                project_id=own(s).project, opts=pulumi.InvokeOutputOptions(parent=self)
            )
            billing.Budget(
                f"{name}-budget",
                billing_account=own(s).billing_account,
                display_name=f"spot-eval {s.run_id}",
                amount=billing.BudgetAmountArgs(
                    specified_amount=billing.BudgetAmountSpecifiedAmountArgs(
                        currency_code=s.grant.currency, units=str(units), nanos=nanos
                    )
                ),
                budget_filter=billing.BudgetBudgetFilterArgs(
                    # The Budget API takes the project *number* (spoteval/providers.py GCP_BUDGET_PROJECT).
                    projects=[pulumi.Output.concat("projects/", project.number)],
                    labels={"spot-eval-run": s.run_id},
                    calendar_period="YEAR",
                ),
                threshold_rules=[
                    billing.BudgetThresholdRuleArgs(threshold_percent=0.8),
                    billing.BudgetThresholdRuleArgs(threshold_percent=1.0),
                    billing.BudgetThresholdRuleArgs(threshold_percent=1.0, spend_basis="FORECASTED_SPEND"),
                ],
                all_updates_rule=billing.BudgetAllUpdatesRuleArgs(disable_default_iam_recipients=False),
                opts=child(self),
            )
        self.register_outputs({})


# --- event capture ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventCaptureArgs:
    settings: Settings
    instance_name_prefix: pulumi.Input[str]


class EventCapture(pulumi.ComponentResource):
    """A log sink of this node's `compute.instances.preempted` system events into a log bucket that
    keeps them for 400 days, whatever happens to the node."""

    def __init__(self, name: str, args: EventCaptureArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:gcp:EventCapture", name, None, opts)
        s = args.settings
        self.log_bucket = logging.ProjectBucketConfig(
            f"{name}-events",
            project=own(s).project,
            location="global",
            bucket_id=f"spot-eval-{s.run_id}",
            retention_days=400,
            # a record of preemptions: held like the results
            opts=held(self),
        )
        log_filter = pulumi.Output.concat(
            'logName:"cloudaudit.googleapis.com%2Fsystem_event" ',
            'AND protoPayload.methodName="compute.instances.preempted" ',
            'AND protoPayload.resourceName:"/instances/',
            args.instance_name_prefix,
            '"',
        )
        # The log bucket (retained, a fixed id) is declared whatever node.count, so a stop and a
        # resume never drop it from the stack and create it again; the sink only while a node runs.
        self.sink: logging.ProjectSink | None = None
        if s.node.count < 1:
            self.register_outputs({"log_bucket": self.log_bucket.id})
            return
        self.sink = logging.ProjectSink(
            f"{name}-preempted",
            destination=pulumi.Output.concat("logging.googleapis.com/", self.log_bucket.id),
            filter=log_filter,
            unique_writer_identity=True,
            description=f"spot-eval {s.run_id}: preemptions of the run's GPU VMs",
            opts=child(self),
        )
        self.register_outputs({"log_bucket": self.log_bucket.id})


# --- the stack ----------------------------------------------------------------------------------


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    assert settings.zone is not None
    opts = pulumi.ResourceOptions(providers=[provider(settings)])
    name = settings.run_id
    store = Store(name, StoreArgs(settings.region, context.bundle_path, context.manifest_path), opts)
    identity = Identity(name, IdentityArgs(run_id=settings.run_id, bucket=store.bucket.name), opts)
    network = Network(
        name,
        NetworkArgs(
            region=settings.region,
            subnet_cidr=own(settings).subnet_cidr,
            ingress_cidrs=settings.node.ingress_cidrs,
            server_port=settings.server.port,
            # a single node's static address stays while it is stopped (node.count 0)
            static_address=settings.address_kind == "static",
        ),
        opts,
    )
    cache = WeightsCache(name, settings, opts)
    node_ids: pulumi.Input[list[str]] = []
    prefix: pulumi.Input[str] = f"{settings.run_id}-gpu-"
    if settings.node.count >= 1:
        node_args = NodeArgs(
            settings=settings,
            store_url=store.url,
            subnet=network.subnet.id,
            service_account=identity.account.email,
            nat_ip=network.address.address if network.address is not None else None,
            cache_disk=cache.disk.id,
        )
        depends = [store.bundle, *identity.members] + ([store.manifest] if store.manifest else [])
        node_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=depends))
        if settings.node.pool:
            pool = Pool(name, node_args, node_opts)
            pool_stop.gcp(name, pool, settings, identity.account.email.apply(lambda e: f"serviceAccount:{e}"))
            node_ids, prefix = pool.node_ids, f"{settings.run_id}-gpu-"
        else:
            node = Node(name, node_args, node_opts)
            node_ids, prefix = node.node_ids, node.instance.name
    EventCapture(name, EventCaptureArgs(settings, prefix), opts)
    StopRules(name, StopRulesArgs(settings), opts)
    pool_size = settings.node.count if settings.node.pool else 0
    return StackOutputs(bucket_url=store.url, node_ids=node_ids, zone=settings.zone, pool_size=pool_size)
