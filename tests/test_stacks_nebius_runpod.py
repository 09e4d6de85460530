"""The Nebius and Runpod stacks rendered by the real program under Pulumi's mock engine, and the Runpod
dynamic providers' create / update / delete against a fake Runpod API on loopback."""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from components.base import OUTPUT_NAMES
from components.mocks import STACKS_DIR, Rendered, RenderError, read_stack_config, render_config, render_stack
from components.runpod import bucket_key_policy
from components.runpod_provider import PodProvider, VolumeProvider
from components.settings import parse as parse_settings
from spoteval.agent.config import parse as parse_agent_config
from spoteval.clouds.runpod import RunpodError
from tests.fake_runpod import FakeRunpod

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
#: Object Storage actions of the storage roles (docs.nebius.com/object-storage/supported-actions,
#: checked 2026-12-01), the ones that matter here
NEBIUS_ACTIONS: dict[str, frozenset[str]] = {
    "storage.uploader": frozenset({"PutObject", "CreateMultipartUpload", "UploadPart", "CopyObject"}),
    "storage.object-viewer": frozenset({"GetObject", "HeadObject"}),
    "storage.object-lister": frozenset({"ListObjects", "ListObjectsV2", "ListObjectVersions"}),
    "storage.object-editor": frozenset({"GetObject", "PutObject", "DeleteObject", "DeleteObjects"}),
    "storage.viewer": frozenset({"GetObject", "ListObjects"}),
    "storage.editor": frozenset(
        {"PutObject", "DeleteObject", "PutBucketVersioning", "PutBucketLifecycleConfiguration"}
    ),
}
NEBIUS = STACKS_DIR / "Pulumi.nebius-eu-north1.yaml"
RUNPOD = STACKS_DIR / "Pulumi.runpod-eu.yaml"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@functools.cache
def nebius() -> Rendered:
    return render_stack(NEBIUS, now=NOW)


@functools.cache
def runpod() -> Rendered:
    return render_stack(RUNPOD, now=NOW)


def variant(path: Any, **changes: Any) -> Rendered:
    config = copy.deepcopy(read_stack_config(path))
    for key, value in changes.items():
        block, name = key.split("__")
        target = config.setdefault(f"spot-eval:{block}", {})
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    return render_config(path.name[len("Pulumi.") : -len(".yaml")], config, now=NOW)


def heredoc(script: str, path: str) -> str:
    start = script.index(f"cat > {path} <<'SPOT_EVAL_EOF'\n")
    body = script[start:].split("\n", 1)[1]
    return body[: body.index("\nSPOT_EVAL_EOF\n")]


# --- Nebius -----------------------------------------------------------------------------------------

INSTANCE = "nebius:index/computeV1Instance:ComputeV1Instance"


def test_nebius_stack_has_the_common_outputs() -> None:
    r = nebius()
    assert tuple(r.outputs) == OUTPUT_NAMES
    assert r.outputs["provider"] == "nebius" and r.outputs["market"] == "spot"
    assert r.outputs["bucket_url"] == "s3://spot-eval-qwen7b-drill-nebius/evals"
    assert r.outputs["node_ids"] == [r.one(INSTANCE).name + "-" + r.outputs["node_ids"][0].rsplit("-", 1)[1]]


def test_nebius_node_is_preemptible_stops_on_preemption_and_does_not_recover_by_itself() -> None:
    vm = nebius().one(INSTANCE).inputs
    assert vm["preemptible"] == {"onPreemption": "STOP"}  # no priority: deprecated, without effect
    assert vm["recoveryPolicy"] == "FAIL"
    assert vm["stopped"] is False
    assert vm["resources"] == {"platform": "gpu-h100-sxm", "preset": "1gpu-16vcpu-200gb"}
    sa = nebius().one("nebius:index/iamV1ServiceAccount:IamV1ServiceAccount")
    assert vm["serviceAccountId"] == f"{sa.name}-" + vm["serviceAccountId"].rsplit("-", 1)[1]


def test_nebius_bucket_policy_lets_the_node_write_only_its_run_and_delete_nothing() -> None:
    r = nebius()
    bucket = r.one("nebius:index/storageV1Bucket:StorageV1Bucket")
    assert bucket.protect and bucket.retain_on_delete
    assert bucket.inputs["versioningPolicy"] == "ENABLED"
    group = r.one("nebius:index/iamV1Group:IamV1Group")
    rules = bucket.inputs["bucketPolicy"]["rules"]
    assert all(rule["groupId"].startswith(group.name) and "anonymous" not in rule for rule in rules)
    granted = {tuple(rule["paths"]): rule["roles"] for rule in rules}
    assert granted == {
        ("evals/runs/qwen7b-drill-nebius/*",): ["storage.uploader", "storage.object-viewer"],
        ("evals/*",): ["storage.object-viewer"],
        ("*",): ["storage.object-lister"],
    }
    # the documented actions of those roles: no delete, no versioning or lifecycle change anywhere
    actions = {role: NEBIUS_ACTIONS[role] for roles in granted.values() for role in roles}
    assert not any({"DeleteObject", "DeleteObjects", "PutBucketVersioning"} & a for a in actions.values())
    assert not any("PutBucketLifecycleConfiguration" in a for a in actions.values())
    writers = [
        paths for paths, roles in granted.items() if any("PutObject" in NEBIUS_ACTIONS[x] for x in roles)
    ]
    assert writers == [("evals/runs/qwen7b-drill-nebius/*",)]
    member = r.one("nebius:index/iamV1GroupMembership:IamV1GroupMembership").inputs
    assert member["parentId"].startswith(group.name)
    assert member["memberId"].startswith(r.one("nebius:index/iamV1ServiceAccount:IamV1ServiceAccount").name)
    key = r.one("nebius:index/iamV2AccessKey:IamV2AccessKey").inputs
    assert key["secretDeliveryMode"] == "MYSTERY_BOX"


def test_nebius_node_may_read_its_key_secret_and_has_no_compute_permission() -> None:
    r = nebius()
    group = r.one("nebius:index/iamV1Group:IamV1Group")
    key = r.one("nebius:index/iamV2AccessKey:IamV2AccessKey")
    (permit,) = [d.inputs for d in r.of_type("nebius:index/iamV1AccessPermit:IamV1AccessPermit")]
    assert permit["parentId"].startswith(group.name)
    assert permit == {
        "parentId": permit["parentId"],
        "resourceId": f"mbsec-{key.name}",  # the MysteryBox secret the key's secret is in
        "role": "mysterybox.payload-viewer",
    }
    documented = {"auditor", "viewer", "editor", "admin", "mysterybox.payload-viewer", *NEBIUS_ACTIONS}
    roles = {permit["role"]} | {
        role
        for rule in r.one("nebius:index/storageV1Bucket:StorageV1Bucket").inputs["bucketPolicy"]["rules"]
        for role in rule["roles"]
    }
    assert roles <= documented and not any(role.startswith("compute.") for role in roles)


def test_nebius_holds_results_and_weights_but_never_compute() -> None:
    r = nebius()
    held = sorted(
        (d.type, d.name.rsplit("-", 1)[-1]) for d in r.resources if d.protect and d.retain_on_delete
    )
    assert held == [
        ("nebius:index/computeV1Disk:ComputeV1Disk", "cache"),
        ("nebius:index/storageV1Bucket:StorageV1Bucket", "bucket"),
    ]
    assert not r.one(INSTANCE).protect


def test_nebius_user_data_carries_no_credentials_and_the_agent_powers_the_vm_off() -> None:
    data = nebius().one(INSTANCE).inputs["cloudInitUserData"]
    # derived from the access key's status, so Pulumi keeps it as a secret in the state
    script = str(data["value"] if isinstance(data, dict) else data)
    assert "AWS_SECRET_ACCESS_KEY=" not in script.replace("AWS_SECRET_ACCESS_KEY={chosen", "")
    assert not re.search(r"(?i)(secret_access_key|private_key)\s*[:=]\s*['\"]?[A-Za-z0-9/+]{20,}", script)
    assert "EnvironmentFile=/etc/spot-eval/s3.env" in script  # the key read from MysteryBox at boot
    assert "'nebius>=0.6'" in script  # the SDK the MysteryBox read needs
    template = json.loads(heredoc(script, "/etc/spot-eval/agent.template.json"))
    config = parse_agent_config({**template, "node": {**template["node"], "id": "computeinstance-1"}})
    assert config.stop_rules.on_done == "poweroff"
    assert config.stop_rules.poweroff_command == ("systemctl", "poweroff")  # recovery_policy FAIL: stays off
    assert config.store == nebius().outputs["bucket_url"]
    assert config.sigterm_grace_s == 50  # 60 s notice, minus the service's stop margins
    assert config.price is not None and config.price.per_hour == 1.25
    node_py = heredoc(script, "/opt/spot-eval/node.py")
    assert '"/v1/instance-data", {"Metadata": "true"}' in node_py


def test_nebius_on_demand_is_the_same_vm_without_the_preemptible_block() -> None:
    vm = variant(NEBIUS, node__market="on_demand", grant__price_cap=3.0).one(INSTANCE).inputs
    assert "preemptible" not in vm and vm["recoveryPolicy"] == "FAIL"


def test_nebius_count_zero_keeps_bucket_and_cache_and_declares_no_vm() -> None:
    r = variant(NEBIUS, node__count=0)
    assert r.outputs["node_ids"] == [] and not r.of_type(INSTANCE)
    assert r.of_type("nebius:index/storageV1Bucket:StorageV1Bucket")


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("stop__on_done", "api_stop", "stop.on_done"),
        ("nebius__project_id", "e00abc", "nebius.project_id"),
        ("node__instance_type", "gpu-b200-sxm/8gpu-160vcpu-1792gb", "node.instance_type"),
        ("node__count", 3, "node.count"),
    ],
)
def test_nebius_bad_config_names_the_key(key: str, value: Any, named: str) -> None:
    with pytest.raises(RenderError) as info:
        variant(NEBIUS, **{key: value})
    assert str(info.value).startswith(f"stack config spot-eval:{named}:")


# --- Runpod -----------------------------------------------------------------------------------------

DYNAMIC = "pulumi-python:dynamic:Resource"


def _dynamic(r: Rendered, suffix: str) -> dict[str, Any]:
    (found,) = [d for d in r.of_type(DYNAMIC) if d.name.endswith(suffix)]
    return dict(found.inputs)


def test_runpod_stack_has_the_common_outputs_and_the_configured_bucket() -> None:
    r = runpod()
    assert tuple(r.outputs) == OUTPUT_NAMES
    assert r.outputs["provider"] == "runpod" and r.outputs["region"] == "EU-RO-1"
    assert r.outputs["bucket_url"] == "s3://spot-eval-results-demo/evals"
    assert len(r.outputs["node_ids"]) == 1 and r.outputs["node_ids"][0]


def test_runpod_pod_is_on_demand_in_secure_cloud_with_the_price_capped_by_the_grant() -> None:
    pod = _dynamic(runpod(), "-pod")
    assert pod["gpu_type"] == "NVIDIA A40" and pod["gpu_count"] == 1
    assert pod["max_price_per_gpu"] == 0.5  # grant.price_cap per node-hour / 1 GPU
    assert pod["cloud_type"] == "SECURE" and pod["volume_mount_path"] == "/workspace"
    assert pod["ports"] == ["8000/http"]
    two = _dynamic(variant(RUNPOD, node__gpu_count=2), "-pod")
    assert two["max_price_per_gpu"] == 0.25
    assert runpod().outputs["market"] == "on_demand"


def test_runpod_refuses_spot_because_no_api_offers_interruptible_pods() -> None:
    with pytest.raises(RenderError) as info:
        variant(RUNPOD, node__market="spot")
    message = str(info.value)
    assert message.startswith(
        "stack config spot-eval:node.market: runpod offers no spot capacity through its API"
    )
    assert "REST v1 (`interruptible`) retired 2026-11-15" in message and "checked 2026-12-01" in message
    assert message.endswith("use on_demand") and "\n" not in message


def test_runpod_refuses_community_cloud_since_the_pod_mounts_a_network_volume() -> None:
    with pytest.raises(RenderError) as info:
        variant(RUNPOD, runpod__cloud_type="COMMUNITY")
    message = str(info.value)
    assert message.startswith("stack config spot-eval:runpod.cloud_type: COMMUNITY has no network volumes")
    assert "https://docs.runpod.io/storage/network-volumes" in message and message.endswith("use SECURE")


def test_runpod_weights_volume_is_held_and_mounted_by_the_pod() -> None:
    r = runpod()
    (volume,) = [d for d in r.of_type(DYNAMIC) if d.name.endswith("-weights")]
    assert volume.protect and volume.retain_on_delete
    assert volume.inputs["size_gb"] == 100 and volume.inputs["data_center"] == "EU-RO-1"
    pod = next(d for d in r.of_type(DYNAMIC) if d.name.endswith("-pod"))
    assert not pod.protect
    assert volume.urn in pod.depends_on


def test_runpod_pod_env_references_secrets_and_the_start_command_execs_the_agent() -> None:
    pod = _dynamic(runpod(), "-pod")
    assert pod["env"]["AWS_ACCESS_KEY_ID"] == "{{ RUNPOD_SECRET_spot_eval_s3_access_key_id }}"
    assert pod["env"]["AWS_SECRET_ACCESS_KEY"] == "{{ RUNPOD_SECRET_spot_eval_s3_secret_access_key }}"
    encoded = re.search(r"echo (\S+) \| base64 -d", pod["docker_args"])
    assert encoded is not None
    script = base64.b64decode(encoded.group(1)).decode()
    assert script.rstrip().endswith("exec python3 -m spoteval.agent --config /tmp/spot-eval-agent.json")
    assert "s3://spot-eval-results-demo/evals/spot-eval/agent-bundle.zip" in script
    raw = json.loads(re.search(r"echo '(\{.*\})' \| sed", script).group(1))  # type: ignore[union-attr]
    assert raw["node"]["id"] == "@NODE_ID@" and '"s/@NODE_ID@/$RUNPOD_POD_ID/"' in script
    config = parse_agent_config({**raw, "node": {**raw["node"], "id": "pod-1"}})
    assert config.node.provider == "runpod" and config.sigterm_grace_s is None  # the agent's 5 s
    assert config.spool_dir.startswith("/workspace/")  # survives the erased container disk
    assert config.stop_rules.poweroff_command[1:] == ("-m", "spoteval.agent.api_stop", "runpod")
    assert config.store_options == {
        "endpoint": "https://s3.eu-central-1.amazonaws.com",
        "region": "eu-central-1",
    }


def test_runpod_bucket_key_writes_only_its_run_reads_its_bundle_and_deletes_nothing() -> None:
    raw = {k.removeprefix("spot-eval:"): v for k, v in read_stack_config(RUNPOD).items()}
    settings = parse_settings(raw, stack="runpod-eu")
    policy = json.loads(json.dumps(bucket_key_policy(settings)))
    allowed = {
        (action, resource)
        for statement in policy["Statement"]
        if statement["Effect"] == "Allow"
        for action in statement["Action"]
        for resource in [statement["Resource"]]
    }
    bucket = "arn:aws:s3:::spot-eval-results-demo"
    run = f"{bucket}/evals/runs/qwen7b-drill-runpod/*"
    assert allowed == {
        ("s3:PutObject", run),
        ("s3:GetObject", run),
        ("s3:GetObject", f"{bucket}/evals/spot-eval/*"),
        ("s3:ListBucket", bucket),
    }
    (listing,) = [st for st in policy["Statement"] if st["Action"] == ["s3:ListBucket"]]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["evals/runs/qwen7b-drill-runpod/*"]}}
    objects = {d.inputs["key"] for d in runpod().of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    writable = run.removeprefix(f"{bucket}/").removesuffix("*")
    assert objects and not any(key.startswith(writable) for key in objects)  # the bundle is read-only


def test_runpod_bundle_and_manifest_go_to_the_configured_bucket() -> None:
    objects = {
        d.inputs["key"]: d.inputs["bucket"] for d in runpod().of_type("aws:s3/bucketObjectv2:BucketObjectv2")
    }
    assert objects == {
        "evals/spot-eval/agent-bundle.zip": "spot-eval-results-demo",
        "evals/spot-eval/manifest.jsonl": "spot-eval-results-demo",
    }


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("runpod__bucket_url", "gs://bucket/x", "runpod.bucket_url"),
        ("node__max_price", 0.9, "node.max_price"),
        ("stop__on_done", "poweroff", "stop.on_done"),
        ("runpod__cloud_type", "ALL", "runpod.cloud_type"),
    ],
)
def test_runpod_bad_config_names_the_key(key: str, value: Any, named: str) -> None:
    with pytest.raises(RenderError) as info:
        variant(RUNPOD, **{key: value})
    assert str(info.value).startswith(f"stack config spot-eval:{named}:")


# --- the dynamic providers against a fake Runpod API -------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunpod]:
    server = FakeRunpod(boot_polls=0)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield server
    finally:
        server.close()


def _pod_props(**changes: Any) -> dict[str, Any]:
    props = _dynamic(runpod(), "-pod")
    props.pop("__provider", None)
    props.update(network_volume_id="vol0001", **changes)
    return props


def test_pod_create_reads_the_price_then_creates_an_on_demand_pod_over_rest_v2(fake: FakeRunpod) -> None:
    result = PodProvider().create(_pod_props())
    assert fake.operations() == ["getGpuType", "createPod"]
    (sent,) = fake.variables("createPod")
    assert "interruptible" not in sent and "bidPerGpu" not in sent
    assert sent["gpu"] == {"id": "NVIDIA A40", "count": 1} and sent["cloud"] == "SECURE"
    assert sent["mounts"] == {"network": [{"volumeId": "vol0001", "path": "/workspace"}]}
    assert sent["dataCenterIds"] == ["EU-RO-1"] and sent["ports"] == ["8000/http"]
    assert sent["env"]["AWS_SECRET_ACCESS_KEY"] == "{{ RUNPOD_SECRET_spot_eval_s3_secret_access_key }}"
    assert result.id == "pod0001" and (result.outs or {})["price_per_gpu"] == 0.4


def test_pod_create_is_refused_when_the_price_is_above_the_cap(fake: FakeRunpod) -> None:
    fake.prices["NVIDIA A40"]["secure"] = 0.55
    with pytest.raises(RunpodError, match="above the most the grant allows"):
        PodProvider().create(_pod_props())
    assert "createPod" not in fake.operations()


def test_pod_update_stops_and_starts_after_the_price_and_delete_terminates(fake: FakeRunpod) -> None:
    provider = PodProvider()
    created = provider.create(_pod_props())
    olds = dict(created.outs or {})
    stopped = provider.update(created.id, olds, {**olds, "stopped": True})
    assert fake.actions("stop") == [created.id]
    provider.update(created.id, dict(stopped.outs or {}), {**olds, "stopped": False})
    assert fake.actions("start") == [created.id]
    assert fake.operations()[-2:] == ["getGpuType", "podAction"]
    diff = provider.diff(created.id, olds, {**olds, "image": "runpod/pytorch:other"})
    assert diff.replaces == ["image"] and diff.changes and diff.delete_before_replace
    assert not provider.diff(created.id, olds, dict(olds)).changes
    provider.delete(created.id, olds)
    assert fake.variables("deletePod") == [{"id": created.id}]


def test_volume_provider_creates_grows_and_never_shrinks(fake: FakeRunpod) -> None:
    provider = VolumeProvider()
    props = {"name": "spot-eval-weights", "size_gb": 100, "data_center": "EU-RO-1", "volume_id": None}
    created = provider.create(props)
    assert fake.volumes[created.id]["size"] == 100
    assert provider.diff(created.id, dict(created.outs or {}), {**props, "size_gb": 50}).replaces == [
        "size_gb"
    ]
    provider.update(created.id, dict(created.outs or {}), {**props, "size_gb": 150})
    assert fake.volumes[created.id]["size"] == 150
    provider.delete(created.id, props)
    assert created.id not in fake.volumes
