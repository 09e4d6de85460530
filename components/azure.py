"""Azure: storage account + container with holds, a user-assigned identity limited to the container,
a VNet, the Spot GPU VM (or a Spot scale set), a consumption budget and an activity log alert (those
two in components/azure_rules.py). The stack config's `azure:` block is parsed here too. One explicit
provider, built in `provider()`. Only the submodules used are imported (the package is big).
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pulumi
import pulumi_azure_native as azure_native
from pulumi_azure_native import (
    authorization,
    compute,
    managedidentity,
    network,
    resources,
    storage,
)

from components import pool_stop
from components.azure_holds import StaticAddress, WeightsCache
from components.azure_rules import EventCapture, EventCaptureArgs, StopRules, StopRulesArgs
from components.base import BuildContext, StackOutputs, child, held, short_hash
from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.holds import exclusive
from components.privilege import AZURE_BLOB_DATA_ACTIONS, AZURE_CONDITION_VERSION, azure_blob_condition
from components.settings import CommonKeyRules, Settings, SettingsError, SettingsReader, cidr
from components.startup import render_startup_script
from spoteval.providers import azure as azure_facts

CACHE_LUN: Final = 0
CACHE_DEVICE: Final = f"/dev/disk/azure/scsi1/lun{CACHE_LUN}"
#: blob data actions of the node's role: read, write, add; no delete (the agent never deletes)
BLOB_DATA_ACTIONS: Final = AZURE_BLOB_DATA_ACTIONS

# --- the stack config: rules for the common keys, the `azure:` block -----------------------------


def _zone_problem(region: str, zone: str) -> str | None:
    zones = azure_facts.REGIONS.zones
    return None if zone in zones else f"must be an availability zone number 1, 2 or 3, got {zone!r}"


def _image_problem(image: str) -> str | None:
    if len(image.split(":")) == 4 or image.startswith("/subscriptions/"):
        return None
    return f"must be publisher:offer:sku:version or an image id, got {image!r}"


#: the keys every stack has, as Azure names them: zones 1-3, a Standard public IP, budget alert mails
COMMON_RULES: Final = CommonKeyRules(
    region=re.compile(azure_facts.REGIONS.region),
    zone=_zone_problem,
    image=_image_problem,
    static_address="an Azure VM's Standard public IP is always static",
    budget_alerts=True,
)
SETTINGS_KEYS: Final = frozenset({"resource_group", "admin_username", "ssh_public_key", "vnet_cidr"})
_RESOURCE_GROUP: Final = re.compile(r"^[-\w._()]{1,89}[-\w_()]$")


@dataclass(frozen=True)
class AzureSettings:
    resource_group: str
    admin_username: str
    ssh_public_key: str
    vnet_cidr: str = "10.42.0.0/16"


def parse_settings(block: SettingsReader) -> AzureSettings:
    block.reject_unknown(SETTINGS_KEYS)
    group = block.string("resource_group")
    if not _RESOURCE_GROUP.match(group):
        raise SettingsError("azure.resource_group", f"{group!r} is not a resource group name")
    user = block.string("admin_username", "spoteval")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user) or user in ("root", "admin", "administrator"):
        raise SettingsError("azure.admin_username", f"{user!r} is not an allowed Linux user name")
    key = block.string("ssh_public_key")
    if not re.match(r"^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]+( .*)?$", key):
        raise SettingsError("azure.ssh_public_key", "must be an OpenSSH public key line")
    return AzureSettings(
        resource_group=group,
        admin_username=user,
        ssh_public_key=key,
        vnet_cidr=cidr(block.string("vnet_cidr", "10.42.0.0/16"), "azure.vnet_cidr"),
    )


def own(settings: Settings) -> AzureSettings:
    return settings.block_of(AzureSettings)


def provider(settings: Settings) -> azure_native.Provider:
    """The stack's one Azure provider, location passed explicitly (subscription from the environment)."""
    return azure_native.Provider(f"{settings.run_id}-azure", location=settings.region)


def account_name(settings: Settings) -> str:
    """Storage account names are global, 3-24 lowercase letters and digits: derive a stable one."""
    return "se" + short_hash(own(settings).resource_group, settings.stack, settings.run_id, length=16)


def image_reference(image: str) -> compute.ImageReferenceArgs:
    if image.startswith("/subscriptions/"):
        return compute.ImageReferenceArgs(id=image)
    publisher, offer, sku, version = image.split(":")
    return compute.ImageReferenceArgs(publisher=publisher, offer=offer, sku=sku, version=version)


# --- result store -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreArgs:
    settings: Settings
    resource_group: pulumi.Input[str]
    bundle_path: Path
    manifest_path: Path | None


class Store(pulumi.ComponentResource):
    """Storage account (no public blob access, HTTPS only, TLS 1.2, encrypted), blob versioning and
    the results container, never deleted by Pulumi; plus the agent bundle blob."""

    def __init__(self, name: str, args: StoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:Store", name, None, opts)
        s = args.settings
        self.account = storage.StorageAccount(
            f"{name}-results",
            account_name=account_name(s),
            resource_group_name=args.resource_group,
            kind="StorageV2",
            sku=storage.SkuArgs(name="Standard_LRS"),
            access_tier="Hot",
            allow_blob_public_access=False,
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            encryption=storage.EncryptionArgs(
                key_source="Microsoft.Storage",
                services=storage.EncryptionServicesArgs(
                    blob=storage.EncryptionServiceArgs(enabled=True, key_type="Account")
                ),
            ),
            opts=held(self),
        )
        self.blob_service = storage.BlobServiceProperties(
            f"{name}-versioning",
            account_name=self.account.name,
            resource_group_name=args.resource_group,
            blob_services_name="default",
            is_versioning_enabled=True,
            opts=held(self),
        )
        self.container = storage.BlobContainer(
            f"{name}-container",
            account_name=self.account.name,
            resource_group_name=args.resource_group,
            # Named after its account, so the bucket URL az://NAME names both.
            container_name=account_name(s),
            public_access=storage.PublicAccess.NONE,
            opts=held(self, depends_on=[self.blob_service]),
        )
        self.bundle = storage.Blob(
            f"{name}-agent-bundle",
            account_name=self.account.name,
            resource_group_name=args.resource_group,
            container_name=self.container.name,
            blob_name=OBJECT_KEY,
            type=storage.BlobType.BLOCK,
            content_type="application/zip",
            source=pulumi.FileAsset(str(args.bundle_path)),
            opts=child(self),
        )
        self.manifest: storage.Blob | None = None
        if args.manifest_path is not None:
            self.manifest = storage.Blob(
                f"{name}-manifest",
                account_name=self.account.name,
                resource_group_name=args.resource_group,
                container_name=self.container.name,
                blob_name=MANIFEST_KEY,
                type=storage.BlobType.BLOCK,
                content_type="application/jsonl",
                source=pulumi.FileAsset(str(args.manifest_path)),
                opts=child(self),
            )
        self.url = pulumi.Output.concat("az://", self.container.name)
        self.register_outputs({"bucket_url": self.url, "account": self.account.name})


# --- identity -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdentityArgs:
    settings: Settings
    resource_group: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    container_id: pulumi.Input[str]


class Identity(pulumi.ComponentResource):
    """A user-assigned identity with a custom role on the results container only: read, write, add
    blobs (no delete), conditioned on the blob path (components/privilege.py). The agent reads
    prices from the unauthenticated retail prices API."""

    def __init__(self, name: str, args: IdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:Identity", name, None, opts)
        s = args.settings
        self.identity = managedidentity.UserAssignedIdentity(
            f"{name}-node", resource_group_name=args.resource_group, opts=child(self)
        )
        self.role = authorization.RoleDefinition(
            f"{name}-blob-writer",
            role_definition_id=str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"spot-eval/{s.stack}/{s.run_id}/blob-writer")
            ),
            role_name=f"spot-eval blob writer ({s.run_id})",
            description="Read, write and add blobs; no delete.",
            scope=args.resource_group_id,
            assignable_scopes=[args.resource_group_id],
            permissions=[
                authorization.PermissionArgs(
                    actions=["Microsoft.Storage/storageAccounts/blobServices/containers/read"],
                    data_actions=list(BLOB_DATA_ACTIONS),
                )
            ],
            opts=child(self),
        )
        self.assignment = authorization.RoleAssignment(
            f"{name}-blob-writer",
            principal_id=self.identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=self.role.id,
            scope=args.container_id,
            # Writes only under the run's prefix; reads of the bundle and the run (privilege.py).
            condition=azure_blob_condition(s.run_id),
            condition_version=AZURE_CONDITION_VERSION,
            opts=child(self),
        )
        self.register_outputs({"client_id": self.identity.client_id, "identity_id": self.identity.id})


# --- network ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkArgs:
    settings: Settings
    resource_group: pulumi.Input[str]


class Network(pulumi.ComponentResource):
    """A VNet with one subnet behind a security group: nothing inbound but the model server port
    from the listed CIDRs."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:Network", name, None, opts)
        s = args.settings
        rules = (
            [
                network.SecurityRuleArgs(
                    name="model-server",
                    priority=200,
                    direction="Inbound",
                    access="Allow",
                    protocol="Tcp",
                    source_address_prefixes=list(s.node.ingress_cidrs),
                    source_port_range="*",
                    destination_address_prefix="*",
                    destination_port_range=str(s.server.port),
                )
            ]
            if s.node.ingress_cidrs
            else []
        )
        self.nsg = network.NetworkSecurityGroup(
            f"{name}-node", resource_group_name=args.resource_group, security_rules=rules, opts=child(self)
        )
        self.vnet = network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=args.resource_group,
            address_space=network.AddressSpaceArgs(address_prefixes=[own(s).vnet_cidr]),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )
        self.subnet = network.Subnet(
            f"{name}-subnet",
            resource_group_name=args.resource_group,
            virtual_network_name=self.vnet.name,
            address_prefix=own(s).vnet_cidr,
            network_security_group=network.NetworkSecurityGroupArgs(id=self.nsg.id),
            opts=child(self),
        )
        self.register_outputs({"subnet_id": self.subnet.id})


# --- the node -----------------------------------------------------------------------------------


#: VM properties the Azure API refuses to change on an existing VM (priority only between Low and
#: Spot, never to or from Regular; Azure/azure-cli#11187), replaced instead
VM_REPLACED_ON: Final = ["priority", "evictionPolicy"]


@dataclass(frozen=True)
class NodeArgs:
    settings: Settings
    resource_group: pulumi.Input[str]
    store_url: pulumi.Input[str]
    account_name: pulumi.Input[str]
    identity_id: pulumi.Input[str]
    identity_client_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    cache_disk_id: pulumi.Input[str] = ""
    address_id: pulumi.Input[str] = ""


def _custom_data(args: NodeArgs, cache_device: str | None) -> pulumi.Output[str]:
    s = args.settings
    return pulumi.Output.all(
        pulumi.Output.from_input(args.store_url),
        pulumi.Output.from_input(args.account_name),
        pulumi.Output.from_input(args.identity_client_id),
    ).apply(
        lambda v: base64.b64encode(
            render_startup_script(
                s,
                store_url=v[0],
                cache_device=cache_device,
                # Not secrets: which account to reach, and which of the VM's identities to use.
                extra_env={"AZURE_STORAGE_ACCOUNT_NAME": v[1], "AZURE_CLIENT_ID": v[2]},
            ).encode()
        ).decode()
    )


def _linux(s: Settings) -> compute.LinuxConfigurationArgs:
    return compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=compute.SshConfigurationArgs(
            public_keys=[
                compute.SshPublicKeyArgs(
                    path=f"/home/{own(s).admin_username}/.ssh/authorized_keys",
                    key_data=own(s).ssh_public_key,
                )
            ]
        ),
    )


def _billing(s: Settings) -> compute.BillingProfileArgs | None:
    if not s.node.spot:
        return None
    # -1: never evicted for price, only for capacity; else the grant's cap.
    return compute.BillingProfileArgs(max_price=s.node.max_price if s.node.max_price is not None else -1)


class Node(pulumi.ComponentResource):
    """One GPU VM: Spot priority, deallocated (disks kept) on eviction, max price from the grant,
    cloud-init custom data, scheduled events on, a static public IP and the weights-cache disk
    (components WeightsCache) attached. The VM holds the disk and the NIC, the NIC holds the public
    IP: both are replaced delete-first, and a change of priority (the market) replaces the VM."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:Node", name, None, opts)
        s = args.settings
        node = s.node
        zones = [s.zone] if s.zone else None
        self.nic = network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=args.resource_group,
            ip_configurations=[
                network.NetworkInterfaceIPConfigurationArgs(
                    name="primary",
                    primary=True,
                    subnet=network.SubnetArgs(id=args.subnet_id),
                    public_ip_address=network.PublicIPAddressArgs(id=args.address_id),
                )
            ],
            opts=exclusive(self),
        )
        self.vm = compute.VirtualMachine(
            f"{name}-gpu",
            resource_group_name=args.resource_group,
            hardware_profile=compute.HardwareProfileArgs(vm_size=node.instance_type),
            priority="Spot" if node.spot else "Regular",
            eviction_policy="Deallocate" if node.spot else None,
            billing_profile=_billing(s),
            storage_profile=compute.StorageProfileArgs(
                image_reference=image_reference(node.image),
                os_disk=compute.OSDiskArgs(
                    create_option="FromImage",
                    disk_size_gb=node.root_disk_gb,
                    delete_option="Delete",
                    managed_disk=compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
                ),
                data_disks=[
                    compute.DataDiskArgs(
                        lun=CACHE_LUN,
                        create_option="Attach",
                        delete_option="Detach",
                        managed_disk=compute.ManagedDiskParametersArgs(id=args.cache_disk_id),
                    )
                ],
            ),
            os_profile=compute.OSProfileArgs(
                computer_name=f"{s.run_id}-gpu"[:63],
                admin_username=own(s).admin_username,
                custom_data=_custom_data(args, CACHE_DEVICE),
                linux_configuration=_linux(s),
            ),
            network_profile=compute.NetworkProfileArgs(
                network_interfaces=[compute.NetworkInterfaceReferenceArgs(id=self.nic.id, primary=True)]
            ),
            identity=compute.VirtualMachineIdentityArgs(
                type="UserAssigned", user_assigned_identities=[args.identity_id]
            ),
            scheduled_events_profile=compute.ScheduledEventsProfileArgs(
                terminate_notification_profile=compute.TerminateNotificationProfileArgs(
                    enable=True, not_before_timeout="PT5M"
                )
            ),
            scheduled_events_policy=compute.ScheduledEventsPolicyArgs(
                scheduled_events_additional_publishing_targets=compute.ScheduledEventsAdditionalPublishingTargetsArgs(
                    event_grid_and_resource_graph=compute.EventGridAndResourceGraphArgs(enable=True)
                )
            ),
            zones=zones,
            opts=exclusive(self, replace_on_changes=VM_REPLACED_ON, ignore_changes=["os_profile"]),
        )
        self.node_ids = self.vm.name.apply(lambda n: [n])
        self.register_outputs({"node_ids": self.node_ids})


class Pool(pulumi.ComponentResource):
    """Several GPU VMs: a Spot scale set; evicted instances are deleted and Azure restores capacity
    when it can (spot restore). Each instance keeps its weights cache on its own OS disk."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:azure:Pool", name, None, opts)
        s = args.settings
        node = s.node
        self.scale_set = compute.VirtualMachineScaleSet(
            f"{name}-gpu",
            vm_scale_set_name=pool_stop.group_name(s),
            resource_group_name=args.resource_group,
            orchestration_mode="Uniform",
            overprovision=False,
            upgrade_policy=compute.UpgradePolicyArgs(mode="Manual"),
            sku=compute.SkuArgs(name=node.instance_type, tier="Standard", capacity=node.count),
            spot_restore_policy=compute.SpotRestorePolicyArgs(enabled=True, restore_timeout="PT1H")
            if node.spot
            else None,
            identity=compute.VirtualMachineScaleSetIdentityArgs(
                type="UserAssigned", user_assigned_identities=[args.identity_id]
            ),
            zones=[s.zone] if s.zone else None,
            virtual_machine_profile=compute.VirtualMachineScaleSetVMProfileArgs(
                priority="Spot" if node.spot else "Regular",
                eviction_policy="Delete" if node.spot else None,
                billing_profile=_billing(s),
                os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=s.run_id[:9],
                    admin_username=own(s).admin_username,
                    custom_data=_custom_data(args, None),
                    linux_configuration=_linux(s),
                ),
                storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=image_reference(node.image),
                    os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                        create_option="FromImage",
                        disk_size_gb=node.root_disk_gb + node.cache_disk_gb,
                        managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                            storage_account_type="Premium_LRS"
                        ),
                    ),
                ),
                network_profile=compute.VirtualMachineScaleSetNetworkProfileArgs(
                    network_interface_configurations=[
                        compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                            name="primary",
                            primary=True,
                            ip_configurations=[
                                compute.VirtualMachineScaleSetIPConfigurationArgs(
                                    name="primary",
                                    primary=True,
                                    subnet=compute.ApiEntityReferenceArgs(id=args.subnet_id),
                                    public_ip_address_configuration=compute.VirtualMachineScaleSetPublicIPAddressConfigurationArgs(
                                        name="egress"
                                    ),
                                )
                            ],
                        )
                    ]
                ),
                scheduled_events_profile=compute.ScheduledEventsProfileArgs(
                    terminate_notification_profile=compute.TerminateNotificationProfileArgs(
                        enable=True, not_before_timeout="PT5M"
                    )
                ),
            ),
            # The market is the VM profile's priority, which a scale set cannot change either.
            opts=exclusive(self, replace_on_changes=[f"virtualMachineProfile.{p}" for p in VM_REPLACED_ON]),
        )
        self.node_ids = self.scale_set.name.apply(lambda n: [n])
        self.register_outputs({"node_ids": self.node_ids})


# --- the stack ----------------------------------------------------------------------------------


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    opts = pulumi.ResourceOptions(providers=[provider(settings)])
    name = settings.run_id
    group = resources.ResourceGroup(
        f"{name}-group",
        resource_group_name=own(settings).resource_group,
        location=settings.region,
        # The group holds the storage account: deleting it would delete the results.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True, retain_on_delete=True)),
    )
    store = Store(name, StoreArgs(settings, group.name, context.bundle_path, context.manifest_path), opts)
    identity = Identity(
        name,
        IdentityArgs(
            settings, resource_group=group.name, resource_group_id=group.id, container_id=store.container.id
        ),
        opts,
    )
    net = Network(name, NetworkArgs(settings, group.name), opts)
    cache = WeightsCache(name, settings, group.name, opts)
    address = StaticAddress(name, settings, group.name, opts) if not settings.node.pool else None
    node_ids: pulumi.Input[list[str]] = []
    vm: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    if settings.node.count >= 1:
        node_args = NodeArgs(
            settings=settings,
            resource_group=group.name,
            store_url=store.url,
            account_name=store.account.name,
            identity_id=identity.identity.id,
            identity_client_id=identity.identity.client_id,
            subnet_id=net.subnet.id,
            cache_disk_id=cache.disk.id,
            address_id=address.ip.id if address is not None else "",
        )
        depends = [store.bundle, identity.assignment] + ([store.manifest] if store.manifest else [])
        node_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=depends))
        scope: pulumi.Input[str]
        if settings.node.pool:
            pool = Pool(name, node_args, node_opts)
            pool_stop.azure(name, pool, settings, pool.scale_set.id, identity.identity.principal_id)
            node_ids, scope = pool.node_ids, group.id
        else:
            node = Node(name, node_args, node_opts)
            node_ids, scope = node.node_ids, node.vm.id
            vm = (node.vm.id, node.vm.name)
        EventCapture(name, EventCaptureArgs(settings, group.name, scope), opts)
    StopRules(name, StopRulesArgs(settings, context, group.name, group.id, vm), opts)
    pool_size = settings.node.count if settings.node.pool else 0
    return StackOutputs(
        bucket_url=store.url, node_ids=node_ids, zone=settings.zone or "", pool_size=pool_size
    )
