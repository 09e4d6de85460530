"""AWS: S3 result bucket with holds, instance role, VPC, the spot GPU node (or pool), stop rules and
server-side capture of interruption events (those two in components/aws_rules.py). One
ComponentResource per concern, each child named after its component and parented to it; one explicit
provider, built in `provider()`. The stack config's `aws:` block is parsed here too.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pulumi
import pulumi_aws as aws
from pulumi_aws import autoscaling, ebs, ec2, iam, s3

from components import pool_stop
from components.aws_rules import (
    EventCapture,
    EventCaptureArgs,
    StopRules,
    StopRulesArgs,
    assume_role,
    iam_policy,
)
from components.base import BuildContext, StackOutputs, child, held
from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.holds import exclusive, held_moved, moved_from
from components.privilege import aws_create_only_statement, aws_node_statements
from components.settings import CommonKeyRules, Settings, SettingsReader, cidr
from components.startup import render_startup_script
from spoteval.providers import aws as aws_facts

ROOT_DEVICE: Final = "/dev/sda1"  # Ubuntu AMIs (the Deep Learning AMIs included)
CACHE_DEVICE_NAME: Final = "/dev/sdf"

# --- the stack config: rules for the common keys, the `aws:` block -----------------------------

_AMI: Final = re.compile(r"^(ami-[0-9a-f]{8,17}|resolve:ssm:/[A-Za-z0-9_./-]+)$")


def _zone_problem(region: str, zone: str) -> str | None:
    if re.fullmatch(re.escape(region) + aws_facts.REGIONS.zone_suffix, zone):
        return None
    return f"{zone!r} is not a zone of {region}"


def _image_problem(image: str) -> str | None:
    return None if _AMI.match(image) else f"must be an AMI id or resolve:ssm:/parameter, got {image!r}"


#: the keys every stack has, as AWS names them: the node's disks live in one zone, the budget mails
COMMON_RULES: Final = CommonKeyRules(
    region=re.compile(aws_facts.REGIONS.region),
    zone=_zone_problem,
    zone_required=True,
    image=_image_problem,
    budget_alerts=True,
)
SETTINGS_KEYS: Final = frozenset({"vpc_cidr"})


@dataclass(frozen=True)
class AwsSettings:
    vpc_cidr: str = "10.42.0.0/16"


def parse_settings(block: SettingsReader) -> AwsSettings:
    block.reject_unknown(SETTINGS_KEYS)
    return AwsSettings(vpc_cidr=cidr(block.string("vpc_cidr", "10.42.0.0/16"), "aws.vpc_cidr"))


def own(settings: Settings) -> AwsSettings:
    return settings.block_of(AwsSettings)


def provider(settings: Settings) -> aws.Provider:
    """The one AWS provider of the stack: region passed explicitly, every resource tagged with the run."""
    return aws.Provider(
        f"{settings.run_id}-aws",
        region=settings.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=settings.tags),
    )


# --- result bucket ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreArgs:
    bundle_path: Path
    manifest_path: Path | None


class Store(pulumi.ComponentResource):
    """Private, versioned, encrypted S3 bucket that outlives every node, plus the agent bundle object."""

    def __init__(self, name: str, args: StoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:Store", name, None, opts)
        self.bucket = s3.Bucket(f"{name}-results", force_destroy=False, opts=held(self))
        self.public_access = s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=held(self),
        )
        self.ownership = s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=self.bucket.id,
            rule=s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=held(self),
        )
        self.versioning = s3.BucketVersioning(
            f"{name}-versioning",
            bucket=self.bucket.id,
            versioning_configuration=s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=held(self),
        )
        self.encryption = s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=self.bucket.id,
            rules=[
                s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="AES256"
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=held(self),
        )
        # Plain HTTP is refused: objects only move over TLS. The run record is create-only.
        self.policy = s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=self.bucket.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [self.bucket.arn, pulumi.Output.concat(self.bucket.arn, "/*")],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        },
                        self.bucket.arn.apply(aws_create_only_statement),
                    ],
                }
            ),
            opts=held(self, depends_on=[self.public_access]),
        )
        self.bundle = s3.BucketObjectv2(
            f"{name}-agent-bundle",
            bucket=self.bucket.id,
            key=OBJECT_KEY,
            source=pulumi.FileAsset(str(args.bundle_path)),
            content_type="application/zip",
            opts=child(self, depends_on=[self.encryption, self.ownership]),
        )
        self.manifest: s3.BucketObjectv2 | None = None
        if args.manifest_path is not None:
            self.manifest = s3.BucketObjectv2(
                f"{name}-manifest",
                bucket=self.bucket.id,
                key=MANIFEST_KEY,
                source=pulumi.FileAsset(str(args.manifest_path)),
                content_type="application/jsonl",
                opts=child(self, depends_on=[self.encryption, self.ownership]),
            )
        self.url = pulumi.Output.concat("s3://", self.bucket.id)
        self.register_outputs({"bucket_url": self.url, "bucket_arn": self.bucket.arn})


# --- identity -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdentityArgs:
    bucket_arn: pulumi.Input[str]
    run_id: str


class Identity(pulumi.ComponentResource):
    """The node's role (components/privilege.py): create and read objects under its run's prefix,
    read the agent bundle it cannot write, list its run, read spot prices, publish its own metrics."""

    def __init__(self, name: str, args: IdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:Identity", name, None, opts)
        self.role = iam.Role(
            f"{name}-node", assume_role_policy=assume_role("ec2.amazonaws.com"), opts=child(self)
        )
        bucket_arn = pulumi.Output.from_input(args.bucket_arn)
        run_id = args.run_id
        self.policy = iam.RolePolicy(
            f"{name}-bucket",
            role=self.role.id,
            policy=bucket_arn.apply(lambda arn: iam_policy(aws_node_statements(arn, run_id))),
            opts=child(self),
        )
        self.profile = iam.InstanceProfile(f"{name}-node", role=self.role.name, opts=child(self))
        self.register_outputs({"role_arn": self.role.arn, "instance_profile": self.profile.name})


# --- network ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkArgs:
    vpc_cidr: str
    zone: str
    ingress_cidrs: tuple[str, ...]
    server_port: int


class Network(pulumi.ComponentResource):
    """A small VPC: one public subnet in the node's zone, outbound only unless ingress CIDRs are given."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:Network", name, None, opts)
        self.vpc = ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            opts=child(self),
        )
        self.subnet = ec2.Subnet(
            f"{name}-subnet",
            vpc_id=self.vpc.id,
            cidr_block=args.vpc_cidr,
            availability_zone=args.zone,
            map_public_ip_on_launch=True,
            opts=child(self),
        )
        self.gateway = ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, opts=child(self))
        self.routes = ec2.RouteTable(
            f"{name}-routes",
            vpc_id=self.vpc.id,
            routes=[ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=self.gateway.id)],
            opts=child(self),
        )
        ec2.RouteTableAssociation(
            f"{name}-routes", subnet_id=self.subnet.id, route_table_id=self.routes.id, opts=child(self)
        )
        self.security_group = ec2.SecurityGroup(
            f"{name}-node",
            vpc_id=self.vpc.id,
            description="spot-eval node: outbound only, model server port from the listed CIDRs",
            egress=[
                ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"])
            ],
            ingress=[
                ec2.SecurityGroupIngressArgs(
                    protocol="tcp",
                    from_port=args.server_port,
                    to_port=args.server_port,
                    cidr_blocks=list(args.ingress_cidrs),
                    description="model server",
                )
            ]
            if args.ingress_cidrs
            else [],
            opts=child(self),
        )
        self.register_outputs({"subnet_id": self.subnet.id, "security_group_id": self.security_group.id})


# --- the node -----------------------------------------------------------------------------------


def _metadata_options() -> ec2.InstanceMetadataOptionsArgs:
    # IMDSv2 only; hop limit 2 so containers on the node (the model server) can reach it too.
    return ec2.InstanceMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=2
    )


class WeightsCache(pulumi.ComponentResource):
    """The weights-cache volume, declared whatever `node.count`, `node.market` or pool mode: stopping,
    resizing, switching to a pool or flipping the market never plans its deletion. It was a child of
    the Node component; the alias keeps its identity (no replacement of an existing stack's volume).
    A pool leaves it unattached (pool nodes cache weights on their own root volume)."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:WeightsCache", name, None, opts)
        assert settings.zone is not None
        volume = f"{name}-weights-cache"
        self.volume = ebs.Volume(
            volume,
            availability_zone=settings.zone,
            size=settings.node.cache_disk_gb,
            type="gp3",
            encrypted=True,
            opts=held_moved(
                self, aliases=[moved_from("spot-eval:aws:Node", "aws:ebs/volume:Volume", volume)]
            ),
        )
        self.register_outputs({"volume_id": self.volume.id})


@dataclass(frozen=True)
class NodeArgs:
    settings: Settings
    store_url: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    instance_profile: pulumi.Input[str]
    cache_volume_id: pulumi.Input[str] = ""


class Node(pulumi.ComponentResource):
    """One GPU instance: persistent spot request that stops (not terminates) on interruption, EBS root,
    and the weights-cache volume (components WeightsCache) attached. The instance and the attachment
    are replaced delete-first: the volume attaches to one instance at a time, and the market
    (`instance_market_options`) is replace-only."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:Node", name, None, opts)
        s = args.settings
        node = s.node
        assert s.zone is not None
        cache_id = pulumi.Output.from_input(args.cache_volume_id)
        # The image may be an AMI id or `resolve:ssm:/aws/service/...`, which EC2 resolves at launch;
        # only a launch template takes the latter without a diff on every run.
        self.template = ec2.LaunchTemplate(
            f"{name}-template",
            image_id=node.image,
            iam_instance_profile=ec2.LaunchTemplateIamInstanceProfileArgs(name=args.instance_profile),
            metadata_options=ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=2
            ),
            tag_specifications=[
                ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=s.tags)
                for kind in ("instance", "volume", "spot-instances-request")
            ],
            opts=child(self),
        )
        market = (
            ec2.InstanceInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
                    spot_instance_type="persistent",
                    instance_interruption_behavior="stop",
                    max_price=None if node.max_price is None else f"{node.max_price:.4f}",
                ),
            )
            if node.spot
            else None
        )
        device = cache_id.apply(
            lambda vol: f"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{vol.replace('-', '')}"
        )
        user_data = pulumi.Output.all(pulumi.Output.from_input(args.store_url), device).apply(
            lambda v: render_startup_script(s, store_url=v[0], cache_device=v[1])
        )
        self.instance = ec2.Instance(
            f"{name}-gpu",
            launch_template=ec2.InstanceLaunchTemplateArgs(
                id=self.template.id, version=self.template.latest_version.apply(str)
            ),
            instance_type=node.instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[args.security_group_id],
            associate_public_ip_address=True,
            instance_market_options=market,
            # `shutdown` from inside (the agent's poweroff) stops the instance; nothing terminates it.
            instance_initiated_shutdown_behavior="stop",
            metadata_options=_metadata_options(),
            root_block_device=ec2.InstanceRootBlockDeviceArgs(
                volume_size=node.root_disk_gb, volume_type="gp3", encrypted=True, delete_on_termination=True
            ),
            user_data=user_data,
            tags={**s.tags, "Name": f"{s.run_id}-gpu"},
            opts=exclusive(self),
        )
        self.attachment = ec2.VolumeAttachment(
            f"{name}-weights-cache",
            device_name=CACHE_DEVICE_NAME,
            volume_id=cache_id,
            instance_id=self.instance.id,
            stop_instance_before_detaching=True,
            opts=exclusive(self),
        )
        self.node_ids = self.instance.id.apply(lambda i: [i])
        self.register_outputs({"node_ids": self.node_ids})


class StaticAddress(pulumi.ComponentResource):
    """The Elastic IP of a single node (`node.address: static`), declared with `node.count` 0 too, so
    a stop and a resume keep the address (unassociated while no node runs). It was a child of the
    Node component; the alias keeps its identity."""

    def __init__(
        self, name: str, instance_id: pulumi.Input[str] | None, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot-eval:aws:StaticAddress", name, None, opts)
        address = f"{name}-address"
        self.eip = ec2.Eip(
            address,
            domain="vpc",
            instance=instance_id,
            opts=pulumi.ResourceOptions(
                parent=self, aliases=[moved_from("spot-eval:aws:Node", "aws:ec2/eip:Eip", address)]
            ),
        )
        self.register_outputs({"public_ip": self.eip.public_ip})


class Pool(pulumi.ComponentResource):
    """Several GPU instances: an Auto Scaling group over a launch template, spot capacity chosen
    price-capacity-optimized across the grant's instance types, replaced ahead of interruptions."""

    def __init__(self, name: str, args: NodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:aws:Pool", name, None, opts)
        s = args.settings
        node = s.node
        user_data = pulumi.Output.from_input(args.store_url).apply(
            lambda url: render_startup_script(s, store_url=url, cache_device=None)
        )
        self.template = ec2.LaunchTemplate(
            f"{name}-template",
            image_id=node.image,
            iam_instance_profile=ec2.LaunchTemplateIamInstanceProfileArgs(name=args.instance_profile),
            instance_initiated_shutdown_behavior="terminate",
            metadata_options=ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=2
            ),
            network_interfaces=[
                ec2.LaunchTemplateNetworkInterfaceArgs(
                    device_index=0,
                    associate_public_ip_address="true",
                    security_groups=[args.security_group_id],
                )
            ],
            # Pool nodes are replaced, not restarted: the weights cache lives on each node's root volume.
            block_device_mappings=[
                ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=node.root_disk_gb + node.cache_disk_gb,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            user_data=user_data.apply(lambda text: base64.b64encode(text.encode()).decode()),
            tag_specifications=[
                ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=s.tags)
                for kind in ("instance", "volume")
            ],
            opts=child(self),
        )
        spot = node.spot
        self.group = autoscaling.Group(
            f"{name}-group",
            name=pool_stop.group_name(s),
            min_size=node.count,
            max_size=node.count,
            desired_capacity=node.count,
            vpc_zone_identifiers=[args.subnet_id],
            capacity_rebalance=spot,
            mixed_instances_policy=autoscaling.GroupMixedInstancesPolicyArgs(
                instances_distribution=autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
                    on_demand_base_capacity=0,
                    on_demand_percentage_above_base_capacity=0 if spot else 100,
                    spot_allocation_strategy="price-capacity-optimized",
                    spot_max_price=(f"{node.max_price:.4f}" if spot and node.max_price is not None else ""),
                ),
                launch_template=autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=self.template.id, version="$Latest"
                    ),
                    overrides=[
                        autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(instance_type=t)
                        for t in node.pool_instance_types
                    ],
                ),
            ),
            tags=[
                autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                for k, v in {**s.tags, "Name": f"{s.run_id}-gpu"}.items()
            ],
            opts=child(self),
        )
        self.node_ids = self.group.name.apply(lambda g: [g])
        self.register_outputs({"node_ids": self.node_ids})


# --- the stack ----------------------------------------------------------------------------------


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    assert settings.zone is not None
    opts = pulumi.ResourceOptions(providers=[provider(settings)])
    name = settings.run_id
    store = Store(name, StoreArgs(context.bundle_path, context.manifest_path), opts)
    identity = Identity(name, IdentityArgs(bucket_arn=store.bucket.arn, run_id=settings.run_id), opts)
    network = Network(
        name,
        NetworkArgs(
            vpc_cidr=own(settings).vpc_cidr,
            zone=settings.zone,
            ingress_cidrs=settings.node.ingress_cidrs,
            server_port=settings.server.port,
        ),
        opts,
    )
    cache = WeightsCache(name, settings, opts)
    node_ids: pulumi.Input[list[str]] = []
    instance_id: pulumi.Output[str] | None = None
    group_name: pulumi.Output[str] | None = None
    if settings.node.count >= 1:
        node_args = NodeArgs(
            settings=settings,
            store_url=store.url,
            subnet_id=network.subnet.id,
            security_group_id=network.security_group.id,
            instance_profile=identity.profile.name,
            cache_volume_id=cache.volume.id,
        )
        depends = [store.bundle, identity.policy] + ([store.manifest] if store.manifest else [])
        node_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=depends))
        if settings.node.pool:
            pool = Pool(name, node_args, node_opts)
            node_ids, group_name = pool.node_ids, pool.group.name
            pool_stop.aws(name, pool, identity.role.id, pool.group.arn, settings.run_id)
        else:
            node = Node(name, node_args, node_opts)
            node_ids, instance_id = node.node_ids, node.instance.id
    if settings.address_kind == "static":
        StaticAddress(name, instance_id, opts)
    EventCapture(name, EventCaptureArgs(settings, instance_id), opts)
    StopRules(name, StopRulesArgs(settings, context, instance_id, group_name), opts)
    pool_size = settings.node.count if settings.node.pool else 0
    return StackOutputs(bucket_url=store.url, node_ids=node_ids, zone=settings.zone, pool_size=pool_size)
