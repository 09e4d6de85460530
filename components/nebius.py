"""Nebius AI Cloud: a preemptible GPU VM, a protected Object Storage bucket and a service account
that reaches only what the node needs, with the `pulumi-nebius` provider.

- Result bucket (`StorageV1Bucket`): versioned, private (no anonymous rule), `protect=True`,
  `retain_on_delete=True`. Its bucket policy names one group only, whose sole member is the node's
  service account, with the documented storage roles (spoteval/provider_rules.py `NEBIUS_ROLES`):
  `storage.uploader` + `storage.object-viewer` on the run's prefix (`evals/runs/{run_id}/*`: write
  and read back its records), `storage.object-viewer` on the stack's prefix (`evals/*`: the agent
  bundle and manifest) and `storage.object-lister` on the bucket (key names only). No role has
  DeleteObject, PutBucketVersioning or PutBucketLifecycleConfiguration; PutObject on the run's
  prefix can overwrite a key there (no role is create-only), and the versioned bucket keeps the
  earlier version.
- Identity: a service account, its group membership, and an access key whose secret is delivered
  into MysteryBox (`secret_delivery_mode: MYSTERY_BOX`): nothing secret is in the user data. An
  access permit gives the group `mysterybox.payload-viewer` on that one secret, so at first boot
  the VM reads it with its service account's token (the instance metadata service) and keeps it in
  `/etc/spot-eval/s3.env` (root only) on its boot disk. No compute permission: the node never
  calls the compute API.
- Node (`ComputeV1Instance`): `preemptible {on_preemption: STOP}` (no `priority`: deprecated and
  without effect), `recovery_policy: FAIL`, the service account attached, a boot disk from the image
  family, a protected weights-cache disk, the startup script as cloud-init user data
  (components/startup.py). With `recovery_policy: FAIL` a shutdown from inside the guest stops
  the VM and does not restart it (instance.proto), so the agent's `on_done: poweroff` ends the bill
  for compute.
- Bid (components/nebius_price.py): a spot node with a price cap gets a `BillingV1PricingPolicy`
  whose per-GPU `max_price` is the cap over the preset's GPUs, rounded down to 3 decimals, and
  references it (`spot_pricing_policy`); without a cap it follows the spot price.
- Stop rules: max runtime and idle go to the agent (Nebius has no built-in one); the price cap is
  checked against the grant before anything is declared (components/settings.py) and before each
  start by the control plane's callers (spoteval/grant.py).

Outputs: the common ones (`provider` ... `address_kind`); `node_ids` is the instance id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

import pulumi
import pulumi_nebius as nebius

from components.base import BuildContext, StackOutputs, child, held
from components.holds import exclusive
from components.nebius_price import pricing_policy
from components.s3_objects import s3_compatible_provider, upload
from components.settings import CommonKeyRules, Settings, SettingsError, SettingsReader
from components.startup import OBSTORE_REQUIREMENT, SERVICE, render_startup_script
from spoteval.provider_rules import NEBIUS_ROLES
from spoteval.providers import NEBIUS
from spoteval.record import RunLayout

OBJECT_STORAGE: Final = NEBIUS.api_urls["object_storage"]
#: the node's roles (documented ones only: spoteval/providers.py)
WRITE_ROLE: Final = NEBIUS_ROLES["write"][0]
READ_ROLE: Final = NEBIUS_ROLES["read"][0]
LIST_ROLE: Final = NEBIUS_ROLES["list"][0]
SECRET_ROLE: Final = NEBIUS_ROLES["secret"][0]
STORE_PREFIX: Final = "evals"
#: the SDK the first boot reads the access key's secret from MysteryBox with (gRPC only)
NEBIUS_SDK: Final = "nebius>=0.6"
S3_ENV_FILE: Final = "/etc/spot-eval/s3.env"
VENV: Final = "/opt/spot-eval/venv"
#: the weights-cache disk, attached with device_id spot-eval-cache [unconfirmed: the by-id name]
CACHE_DEVICE: Final = "/dev/disk/by-id/virtio-spot-eval-cache"

#: Reads the access key's secret from MysteryBox with the VM's service account (first boot only).
_KEYS_PY: Final = r"""
import json, os, sys, urllib.request
from nebius.sdk import SDK
from nebius.api.nebius.mysterybox.v1 import GetPayloadRequest, PayloadServiceClient

secret_id, key_id, out = sys.argv[1:4]
req = urllib.request.Request(@TOKEN_URL@, headers=@HEADERS@)
token = json.load(urllib.request.urlopen(req, timeout=10))["access_token"]
sdk = SDK(credentials=token, user_agent_prefix="spot-eval-node/1")
payload = PayloadServiceClient(sdk).get(GetPayloadRequest(secret_id=secret_id)).wait()
entries = [e for e in payload.data if e.string_value]
chosen = [e for e in entries if "secret" in e.key.lower()] or entries
if len(chosen) != 1:
    sys.exit(f"MysteryBox secret {secret_id}: expected one secret entry, found {[e.key for e in entries]}")
tmp = out + ".tmp"
with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    f.write(f"AWS_ACCESS_KEY_ID={key_id}\nAWS_SECRET_ACCESS_KEY={chosen[0].string_value}\n")
os.replace(tmp, out)
sdk.sync_close()
"""


def _keys_py() -> str:
    """The MysteryBox reader, with the metadata service's token URL and headers (spoteval/providers.py)."""
    metadata = NEBIUS.metadata
    assert metadata is not None
    text = _KEYS_PY.replace("@TOKEN_URL@", json.dumps(metadata.url("token")))
    return text.replace("@HEADERS@", json.dumps(dict(metadata.headers))).lstrip("\n")


# --- the stack config: rules for the common keys, the `nebius:` block -----------------------------

#: the keys every stack has: nothing Nebius-specific (regions only, no zones)
COMMON_RULES: Final = CommonKeyRules(pools=False)
SETTINGS_KEYS: Final = frozenset({"project_id", "tenant_id", "subnet_id"})


@dataclass(frozen=True)
class NebiusSettings:
    project_id: str
    tenant_id: str  # the node's service account joins a group there that the bucket policy names
    subnet_id: str


def parse_settings(block: SettingsReader) -> NebiusSettings:
    block.reject_unknown(SETTINGS_KEYS)
    ids = {key: block.string(key) for key in ("project_id", "tenant_id", "subnet_id")}
    for key, prefix in (("project_id", "project-"), ("tenant_id", "tenant-"), ("subnet_id", "vpcsubnet-")):
        if not ids[key].startswith(prefix):
            raise SettingsError(f"nebius.{key}", f"must be a Nebius {prefix}... id, got {ids[key]!r}")
    return NebiusSettings(**ids)


def own(settings: Settings) -> NebiusSettings:
    return settings.block_of(NebiusSettings)


@dataclass(frozen=True)
class NebiusNodeArgs:
    settings: Settings
    context: BuildContext
    storage: pulumi.ProviderResource  # S3-compatible access to Nebius Object Storage (the bundle upload)


def bucket_name(settings: Settings) -> str:
    return f"spot-eval-{settings.run_id}"


def store_url(settings: Settings) -> str:
    return f"s3://{bucket_name(settings)}/{STORE_PREFIX}"


def bucket_rules(
    settings: Settings, group_id: pulumi.Input[str]
) -> list[nebius.StorageV1BucketBucketPolicyRuleArgs]:
    """The node's group: write and read its run, read the stack's objects, list key names."""
    run = f"{STORE_PREFIX}/{RunLayout(settings.run_id).prefix}*"

    def rule(paths: list[str], roles: list[str]) -> nebius.StorageV1BucketBucketPolicyRuleArgs:
        return nebius.StorageV1BucketBucketPolicyRuleArgs(group_id=group_id, paths=paths, roles=roles)

    return [
        rule([run], [WRITE_ROLE, READ_ROLE]),
        rule([f"{STORE_PREFIX}/*"], [READ_ROLE]),
        rule(["*"], [LIST_ROLE]),
    ]


def preamble(settings: Settings, secret_id: str, key_id: str) -> str:
    """The first part of the user data: the SDK, the bucket's key from MysteryBox, the unit drop-in."""
    drop_in = f"/etc/systemd/system/{SERVICE}.d/nebius.conf"
    return "".join(
        [
            "#!/bin/bash\n",
            "# spot-eval on Nebius: the SDK (MysteryBox), the bucket key, the agent's env.\n",
            "set -euo pipefail\n",
            "install -d -m 0755 /etc/spot-eval /opt/spot-eval\n",
            f"[ -x {VENV}/bin/python ] || python3 -m venv {VENV}"
            " || { apt-get update -qq && apt-get install -y -qq python3-venv"
            f" && python3 -m venv {VENV}; }}\n",
            f"{VENV}/bin/pip install -q --disable-pip-version-check '{OBSTORE_REQUIREMENT}' '{NEBIUS_SDK}'\n",
            "cat > /opt/spot-eval/nebius_keys.py <<'SPOT_EVAL_EOF'\n",
            _keys_py(),
            "SPOT_EVAL_EOF\n",
            f"[ -s {S3_ENV_FILE} ] || {VENV}/bin/python /opt/spot-eval/nebius_keys.py"
            f" {secret_id} {key_id} {S3_ENV_FILE}\n",
            f"install -d -m 0755 /etc/systemd/system/{SERVICE}.d\n",
            f"cat > {drop_in} <<'SPOT_EVAL_EOF'\n",
            "[Service]\n",
            f"EnvironmentFile={S3_ENV_FILE}\n",
            "SPOT_EVAL_EOF\n",
        ]
    )


def user_data(settings: Settings, secret_id: str, key_id: str, cache_device: str) -> str:
    region = settings.region
    extra = {
        "AWS_ENDPOINT_URL": OBJECT_STORAGE.format(region=region),
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }
    script = render_startup_script(
        settings, store_url=store_url(settings), cache_device=cache_device, extra_env=extra
    )
    return preamble(settings, secret_id, key_id) + script.split("\n", 1)[1]


class NebiusNode(pulumi.ComponentResource):
    """Bucket, identity and preemptible GPU VM of one Nebius stack."""

    def __init__(self, name: str, args: NebiusNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:nebius:Node", name, None, opts)
        s = args.settings
        project = own(s).project_id
        labels = dict(s.tags)

        account = nebius.IamV1ServiceAccount(
            f"{name}-sa",
            parent_id=project,
            name=f"spot-eval-{s.run_id}",
            description=f"spot-eval node of run {s.run_id}: its bucket, its VM",
            labels=labels,
            opts=child(self),
        )
        group = nebius.IamV1Group(
            f"{name}-group", parent_id=own(s).tenant_id, name=f"spot-eval-{s.run_id}", opts=child(self)
        )
        nebius.IamV1GroupMembership(
            f"{name}-membership", parent_id=group.id, member_id=account.id, opts=child(self)
        )
        self.bucket = nebius.StorageV1Bucket(
            f"{name}-bucket",
            parent_id=project,
            name=bucket_name(s),
            versioning_policy="ENABLED",
            labels=labels,
            bucket_policy=nebius.StorageV1BucketBucketPolicyArgs(rules=bucket_rules(s, group.id)),
            opts=held(self),
        )
        key = nebius.IamV2AccessKey(
            f"{name}-key",
            parent_id=project,
            account=nebius.IamV2AccessKeyAccountArgs(
                service_account=nebius.IamV2AccessKeyAccountServiceAccountArgs(id=account.id)
            ),
            description=f"spot-eval run {s.run_id}: the node's access to its bucket",
            secret_delivery_mode="MYSTERY_BOX",
            opts=child(self),
        )
        secret_id = key.status.apply(lambda st: str(getattr(st, "secret_reference_id", None) or ""))
        nebius.IamV1AccessPermit(
            f"{name}-secret-permit",
            parent_id=group.id,
            resource_id=secret_id,
            role=SECRET_ROLE,
            opts=child(self),
        )
        objects = pulumi.ResourceOptions(parent=self, provider=args.storage, depends_on=[self.bucket])
        context = args.context
        uploaded = upload(
            name, self.bucket.name, "evals", context.bundle_path, context.manifest_path, opts=objects
        )
        # The weights cache is declared whatever node.count: stopping never plans its deletion.
        cache = nebius.ComputeV1Disk(
            f"{name}-cache",
            parent_id=project,
            name=f"spot-eval-{s.run_id}-cache",
            type="NETWORK_SSD",
            size_gibibytes=s.node.cache_disk_gb,
            labels=labels,
            opts=held(self),
        )
        node_ids: pulumi.Input[list[str]] = []
        if s.node.count > 0:
            # Fixed names, and the VM holds both disks: the boot disk and the VM are replaced
            # delete-first; `preemptible` cannot be added or removed on a VM (the market), so a
            # change of it replaces the VM.
            boot = nebius.ComputeV1Disk(
                f"{name}-boot",
                parent_id=project,
                name=f"spot-eval-{s.run_id}-boot",
                type="NETWORK_SSD",
                size_gibibytes=s.node.root_disk_gb,
                source_image_family=nebius.ComputeV1DiskSourceImageFamilyArgs(image_family=s.node.image),
                labels=labels,
                opts=exclusive(self),
            )
            platform, _, preset = s.node.instance_type.partition("/")
            script = key.status.apply(
                lambda st: user_data(
                    s,
                    str(getattr(st, "secret_reference_id", None) or ""),
                    str(getattr(st, "aws_access_key_id", None) or ""),
                    CACHE_DEVICE,
                )
            )
            instance = nebius.ComputeV1Instance(
                f"{name}-vm",
                parent_id=project,
                name=f"spot-eval-{s.run_id}",
                labels=labels,
                resources=nebius.ComputeV1InstanceResourcesArgs(platform=platform, preset=preset),
                boot_disk=nebius.ComputeV1InstanceBootDiskArgs(
                    attach_mode="READ_WRITE",
                    existing_disk=nebius.ComputeV1InstanceBootDiskExistingDiskArgs(id=boot.id),
                ),
                secondary_disks=[
                    nebius.ComputeV1InstanceSecondaryDiskArgs(
                        attach_mode="READ_WRITE",
                        device_id="spot-eval-cache",
                        existing_disk=nebius.ComputeV1InstanceSecondaryDiskExistingDiskArgs(id=cache.id),
                    )
                ],
                network_interfaces=[
                    nebius.ComputeV1InstanceNetworkInterfaceArgs(
                        name="eth0",
                        subnet_id=own(s).subnet_id,
                        ip_address=nebius.ComputeV1InstanceNetworkInterfaceIpAddressArgs(),
                        public_ip_address=nebius.ComputeV1InstanceNetworkInterfacePublicIpAddressArgs(
                            static=s.node.address == "static"
                        ),
                    )
                ],
                preemptible=(
                    nebius.ComputeV1InstancePreemptibleArgs(on_preemption="STOP") if s.node.spot else None
                ),
                spot_pricing_policy=pricing_policy(name, s, project, self),
                recovery_policy="FAIL",
                service_account_id=account.id,
                cloud_init_user_data=script,
                stopped=False,
                opts=exclusive(self, replace_on_changes=["preemptible"], depends_on=[self.bucket, *uploaded]),
            )
            node_ids = instance.id.apply(lambda i: [i])
        self.outputs = StackOutputs(bucket_url=store_url(s), node_ids=node_ids, zone="")
        self.register_outputs({"bucket_url": self.outputs.bucket_url, "node_ids": node_ids})


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    provider = nebius.Provider("nebius", parent_id=own(settings).project_id)
    storage = s3_compatible_provider(
        "nebius-object-storage", OBJECT_STORAGE.format(region=settings.region), settings.region
    )
    node = NebiusNode(
        f"spot-eval-{settings.run_id}",
        NebiusNodeArgs(settings, context, storage),
        pulumi.ResourceOptions(providers=[provider]),
    )
    return node.outputs
