"""Runpod: an on-demand GPU pod and a network volume for the weights, declared through the dynamic
providers of components/runpod_provider.py (REST API v2); results go to an S3-compatible bucket on a
provider that has one (Runpod has no object storage), named by `runpod.bucket_url` / `s3_endpoint`.
Runpod offers no interruptible pods through any current API, so `node.market: spot` is refused
(spoteval/providers.py, `RUNPOD`).

- Network volume (weights cache, `node.cache_disk_gb`) in the stack's data center (`region`, e.g.
  `EU-RO-1`), mounted at /workspace: `protect=True`, `retain_on_delete=True`. It also holds the
  agent's spool, so what a notice could not upload survives the pod's container disk, which Runpod
  erases when a stopped pod resumes.
- Pod: `POST /v2/pods` after reading the list price of its cloud, never above the grant's price cap
  per GPU (`grant.price_cap` / `node.gpu_count`), in Secure Cloud (network volumes exist there only:
  `runpod.cloud_type: COMMUNITY` is refused), the image,
  and a start command that installs obstore, fetches the agent bundle from the bucket, writes the
  agent's config with the pod's id (`RUNPOD_POD_ID`) and execs the agent (the container's main
  process, so Runpod's SIGTERM reaches it; 5 s later comes SIGKILL).
- No credentials in the pod's definition: the bucket's key comes from Runpod secrets referenced in the
  environment (`{{ RUNPOD_SECRET_name }}`, names in `runpod.secrets`).
- Stop rules: max runtime, idle and budget go to the agent; `on_done: api_stop` stops the pod
  through Runpod's API (an exiting container would be restarted).

Outputs: the common ones; `node_ids` is the pod id, `bucket_url` the configured bucket.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi

from components.base import BuildContext, StackOutputs, held
from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.holds import exclusive
from components.runpod_provider import NetworkVolume, RunpodPod
from components.s3_objects import s3_compatible_provider, upload
from components.settings import BUCKET_URL, CommonKeyRules, Settings, SettingsError, SettingsReader
from components.startup import (
    CONTAINER_BUNDLE_DIR,
    CONTAINER_PYTHON,
    NODE_ID_PLACEHOLDER,
    OBSTORE_REQUIREMENT,
    harness_install,
    has_manifest,
    object_url,
    server_command,
    stack_config_args,
    unpack_bundle,
)
from spoteval.agent.config import build_agent_config
from spoteval.providers import RUNPOD_NETWORK_VOLUMES as NETWORK_VOLUMES
from spoteval.record import RunLayout

WORKSPACE: Final = "/workspace"
CACHE_DIR: Final = f"{WORKSPACE}/spot-eval-cache"
STATE_DIR: Final = f"{WORKSPACE}/spot-eval"
CONFIG_FILE: Final = "/tmp/spot-eval-agent.json"
#: where the stack puts the agent bundle and the manifest (under the bucket URL's prefix)
BUNDLE_DIR: Final = OBJECT_KEY.rsplit("/", 1)[0] + "/"
BUNDLE_FILE: Final = "/tmp/spot-eval-agent-bundle.zip"

# --- the stack config: rules for the common keys, the `runpod:` block -----------------------------

#: the keys every stack has: one node (the market is on-demand only, from the provider facts)
COMMON_RULES: Final = CommonKeyRules(pools=False)
SETTINGS_KEYS: Final = frozenset({"bucket_url", "s3_endpoint", "s3_region", "cloud_type", "secrets"})


@dataclass(frozen=True)
class RunpodSettings:
    bucket_url: str  # s3:// bucket on a provider that has object storage (Runpod has none)
    s3_endpoint: str
    s3_region: str
    cloud_type: str  # SECURE (a network volume needs it)
    #: names of Runpod secrets holding the bucket's S3 access key id and secret (never the values)
    secrets: Mapping[str, str] = field(default_factory=dict)


def parse_settings(block: SettingsReader) -> RunpodSettings:
    block.reject_unknown(SETTINGS_KEYS)
    bucket_url = block.string("bucket_url")
    if not bucket_url.startswith("s3://") or not BUCKET_URL.match(bucket_url):
        raise SettingsError(
            "runpod.bucket_url",
            f"must be s3://BUCKET[/PREFIX] (Runpod has no object storage), got {bucket_url!r}",
        )
    endpoint = block.string("s3_endpoint")
    if not re.match(r"^https://[^\s/]+", endpoint):
        raise SettingsError("runpod.s3_endpoint", f"must be an https:// URL, got {endpoint!r}")
    cloud_type = block.choice("cloud_type", ("SECURE", "COMMUNITY"), "SECURE")
    if cloud_type != "SECURE":
        raise SettingsError(
            "runpod.cloud_type",
            f"{cloud_type} has no network volumes (Secure Cloud only: {NETWORK_VOLUMES.url}, "
            f"checked {NETWORK_VOLUMES.checked}) and the pod mounts one for the weights "
            "(node.cache_disk_gb); use SECURE",
        )
    secrets = block.string_map("secrets") or {
        "access_key_id": "spot_eval_s3_access_key_id",
        "secret_access_key": "spot_eval_s3_secret_access_key",
    }
    if set(secrets) != {"access_key_id", "secret_access_key"} or not all(
        re.fullmatch(r"[A-Za-z0-9_]+", v) for v in secrets.values()
    ):
        raise SettingsError(
            "runpod.secrets", "must name the Runpod secrets access_key_id and secret_access_key"
        )
    return RunpodSettings(
        bucket_url=bucket_url.rstrip("/"),
        s3_endpoint=endpoint.rstrip("/"),
        s3_region=block.string("s3_region", "us-east-1"),
        cloud_type=cloud_type,
        secrets=secrets,
    )


def own(settings: Settings) -> RunpodSettings:
    return settings.block_of(RunpodSettings)


def agent_config(settings: Settings) -> dict[str, Any]:
    """The node agent's config for this pod (spoteval/agent/config.py); the pod fills in its id."""
    rp = own(settings)
    return build_agent_config(
        **stack_config_args(settings, f"{CACHE_DIR}/venvs"),
        store=rp.bucket_url,
        store_options={"endpoint": rp.s3_endpoint, "region": rp.s3_region},
        node_id=NODE_ID_PLACEHOLDER,
        server_url=f"http://127.0.0.1:{settings.server.port}",
        server_command=server_command(settings, cache_dir=CACHE_DIR),
        # on the network volume: what a 5 s notice leaves spooled survives the container disk
        spool_dir=f"{STATE_DIR}/spool",
        work_dir="/tmp/spot-eval-work",
        boot_file=f"{STATE_DIR}/boot.json",
        price_per_hour=settings.configured_price,
    )


def start_script(settings: Settings) -> str:
    """What the pod runs (bash): obstore, the bundle, the config with the pod's id, then exec the agent."""
    store = own(settings).bucket_url
    config = json.dumps(agent_config(settings), sort_keys=True)
    fetch = (
        "import obstore, sys; from obstore.store import from_url\n"
        "url, out = sys.argv[1], sys.argv[2]\n"
        "scheme, rest = url.split('://', 1); bucket, key = rest.split('/', 1)\n"
        "open(out, 'wb').write(bytes(obstore.get(from_url(f'{scheme}://{bucket}'), key).bytes()))\n"
    )
    lines = [
        "set -euo pipefail",
        f"mkdir -p {STATE_DIR}/spool {CACHE_DIR}/huggingface",
        "python3 -c 'import obstore' 2>/dev/null"
        f" || python3 -m pip install -q --disable-pip-version-check '{OBSTORE_REQUIREMENT}'",
        f"python3 -c {shlex.quote(fetch)} {shlex.quote(object_url(store, OBJECT_KEY))} {BUNDLE_FILE}",
        f'echo {shlex.quote(config)} | sed "s/{NODE_ID_PLACEHOLDER}/$RUNPOD_POD_ID/" > {CONFIG_FILE}',
        unpack_bundle("python3", BUNDLE_FILE, CONTAINER_BUNDLE_DIR),
        f"export PYTHONPATH={CONTAINER_BUNDLE_DIR}",
        *harness_install(settings, CONTAINER_PYTHON),
    ]
    if has_manifest(settings):
        manifest = "/tmp/spot-eval-manifest.jsonl"
        lines += [
            f"python3 -c {shlex.quote(fetch)} {shlex.quote(object_url(store, MANIFEST_KEY))} {manifest}",
            f"python3 -m spoteval.agent manifest --config {CONFIG_FILE} {manifest}",
        ]
    lines.append(f"exec python3 -m spoteval.agent --config {CONFIG_FILE}")
    return "\n".join(lines) + "\n"


def docker_args(settings: Settings) -> str:
    """The pod's start command: the script travels base64-encoded, so no quoting reaches Runpod."""
    encoded = base64.b64encode(start_script(settings).encode()).decode()
    return (
        f"bash -c 'echo {encoded} | base64 -d > /tmp/spot-eval-start.sh && exec bash /tmp/spot-eval-start.sh'"
    )


def secret_ref(name: str) -> str:
    """A reference to a Runpod secret, resolved by Runpod when the pod starts (the value is never here)."""
    return "{{ RUNPOD_SECRET_" + name + " }}"


def pod_env(settings: Settings) -> dict[str, str]:
    rp = own(settings)
    return {
        "AWS_ACCESS_KEY_ID": secret_ref(rp.secrets["access_key_id"]),
        "AWS_SECRET_ACCESS_KEY": secret_ref(rp.secrets["secret_access_key"]),
        "AWS_ENDPOINT_URL": rp.s3_endpoint,
        "AWS_REGION": rp.s3_region,
        "HF_HOME": f"{CACHE_DIR}/huggingface",
        "PIP_CACHE_DIR": f"{CACHE_DIR}/pip",
        "SPOT_EVAL_CACHE_DIR": CACHE_DIR,
    }


def bucket_key_policy(settings: Settings) -> dict[str, Any]:
    """The least the pod's bucket key (the Runpod secrets) needs, as an AWS IAM policy for the key's
    user: the bucket is not declared here, so the user grants this. It writes and reads its run's
    prefix, reads the agent bundle and manifest (which it cannot write), lists its run only, and
    deletes nothing."""
    bucket, _, prefix = own(settings).bucket_url.removeprefix("s3://").partition("/")
    root = f"{prefix}/" if prefix else ""
    run = f"{root}{RunLayout(settings.run_id).prefix}"
    arn = f"arn:aws:s3:::{bucket}"
    assert MANIFEST_KEY.startswith(BUNDLE_DIR)
    allow: dict[str, Any] = {"Effect": "Allow"}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                **allow,
                "Sid": "RunRecord",
                "Action": ["s3:PutObject", "s3:GetObject"],
                "Resource": f"{arn}/{run}*",
            },
            {
                **allow,
                "Sid": "AgentBundle",
                "Action": ["s3:GetObject"],
                "Resource": f"{arn}/{root}{BUNDLE_DIR}*",
            },
            {
                **allow,
                "Sid": "ListRunRecord",
                "Action": ["s3:ListBucket"],
                "Resource": arn,
                "Condition": {"StringLike": {"s3:prefix": [f"{run}*"]}},
            },
        ],
    }


def max_price_per_gpu(settings: Settings) -> float | None:
    """The grant's price cap per node-hour, per GPU of the pod."""
    cap = settings.grant.price_cap
    return None if cap is None else round(cap / settings.node.gpu_count, 4)


@dataclass(frozen=True)
class RunpodNodeArgs:
    settings: Settings
    context: BuildContext
    storage: pulumi.ProviderResource


class RunpodNode(pulumi.ComponentResource):
    """Weights volume and on-demand pod of one Runpod stack (results in the configured bucket)."""

    def __init__(self, name: str, args: RunpodNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:runpod:Node", name, None, opts)
        s = args.settings
        bucket = own(s).bucket_url.removeprefix("s3://").split("/", 1)
        prefix = bucket[1] if len(bucket) > 1 else ""
        uploaded = upload(
            name,
            bucket[0],
            prefix,
            args.context.bundle_path,
            args.context.manifest_path,
            opts=pulumi.ResourceOptions(parent=self, provider=args.storage),
        )
        self.volume = NetworkVolume(
            f"{name}-weights",
            volume_name=f"spot-eval-{s.run_id}-weights",
            size_gb=s.node.cache_disk_gb,
            data_center=s.region,
            opts=held(self),
        )
        node_ids: pulumi.Input[list[str]] = []
        if s.node.count > 0:
            self.pod = RunpodPod(
                f"{name}-pod",
                pod_name=f"spot-eval-{s.run_id}",
                image=s.node.image,
                gpu_type=s.node.instance_type,
                gpu_count=s.node.gpu_count,
                max_price_per_gpu=max_price_per_gpu(s),
                cloud_type=own(s).cloud_type,
                container_disk_gb=s.node.root_disk_gb,
                docker_args=docker_args(s),
                ports=[f"{s.server.port}/http"],
                env=pod_env(s),
                network_volume_id=self.volume.id,
                data_center=s.region,
                volume_mount_path=WORKSPACE,
                # its diff asks for delete-first too (runpod_provider.py); said here so a render shows it
                opts=exclusive(self, depends_on=[self.volume, *uploaded]),
            )
            node_ids = self.pod.id.apply(lambda i: [i])
        self.outputs = StackOutputs(bucket_url=own(s).bucket_url, node_ids=node_ids, zone="")
        self.register_outputs({"bucket_url": self.outputs.bucket_url, "node_ids": node_ids})


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    storage = s3_compatible_provider("results-storage", own(settings).s3_endpoint, own(settings).s3_region)
    node = RunpodNode(f"spot-eval-{settings.run_id}", RunpodNodeArgs(settings, context, storage))
    return node.outputs
