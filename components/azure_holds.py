"""Azure: what a stack keeps whatever `node.count`, `node.market` or pool mode (components/holds.py):
the weights-cache managed disk (a hold) and a single VM's static public IP. Both were children of the
Node component (components/azure.py); their aliases keep their identity in existing stacks."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute, network

from components.holds import held_moved, moved_from
from components.settings import Settings


class WeightsCache(pulumi.ComponentResource):
    """The weights-cache managed disk, declared whatever `node.count`, `node.market` or pool mode:
    stopping, resizing, switching to a pool or flipping the market never plans its deletion. It was a
    child of the Node component; the alias keeps its identity (no replacement of an existing stack's
    disk). A scale set leaves it unattached (its VMs cache weights on their own OS disk)."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        resource_group: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spot-eval:azure:WeightsCache", name, None, opts)
        disk = f"{name}-weights-cache"
        self.disk = compute.Disk(
            disk,
            resource_group_name=resource_group,
            creation_data=compute.CreationDataArgs(create_option="Empty"),
            disk_size_gb=settings.node.cache_disk_gb,
            sku=compute.DiskSkuArgs(name="Premium_LRS"),
            zones=[settings.zone] if settings.zone else None,
            opts=held_moved(
                self, aliases=[moved_from("spot-eval:azure:Node", "azure-native:compute:Disk", disk)]
            ),
        )
        self.register_outputs({"disk": self.disk.id})


class StaticAddress(pulumi.ComponentResource):
    """A single VM's Standard public IP (static), declared with `node.count` 0 too, so a stop and a
    resume keep the address. It was a child of the Node component; the alias keeps its identity."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        resource_group: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spot-eval:azure:StaticAddress", name, None, opts)
        address = f"{name}-address"
        self.ip = network.PublicIPAddress(
            address,
            resource_group_name=resource_group,
            sku=network.PublicIPAddressSkuArgs(name="Standard"),
            public_ip_allocation_method="Static",
            zones=[settings.zone] if settings.zone else None,
            opts=pulumi.ResourceOptions(
                parent=self,
                aliases=[moved_from("spot-eval:azure:Node", "azure-native:network:PublicIPAddress", address)],
            ),
        )
        self.register_outputs({"address": self.ip.id})
