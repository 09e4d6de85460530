"""The model server every stack declares keeps what a restart would otherwise pay for on the weights
disk: vLLM's compile and model-inspection cache (VLLM_CACHE_ROOT), the Hugging Face cache, and the
container image's layers; it runs the pinned vLLM release; `server.load_format` reaches vLLM.
Rendered by the real program against Pulumi's mock engine (components/mocks.py)."""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from components.kubernetes import CACHE_MOUNT
from components.mocks import (
    Rendered,
    RenderError,
    read_stack_config,
    render_config,
    render_stack,
    stack_files,
)
from components.runpod import CACHE_DIR as RUNPOD_CACHE
from components.startup import CACHE_DIR, DOCKER_DROP_IN
from spoteval.vllm.facts import CACHE_ENV, CONTAINER_CACHE, IMAGE, LOAD_FORMATS, VERSION

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
STACKS = {p.name[len("Pulumi.") : -len(".yaml")]: p for p in stack_files()}
VM_STACKS = ("aws-us-east-1", "gcp-us-central1", "azure-eastus", "nebius-eu-north1")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@functools.cache
def rendered(stack: str) -> Rendered:
    return render_stack(STACKS[stack], now=NOW)


def variant(stack: str, **server: Any) -> Rendered:
    config = copy.deepcopy(read_stack_config(STACKS[stack]))
    config["spot-eval:server"].update(server)
    return render_config(stack, config, now=NOW)


def heredoc(script: str, path: str) -> str:
    body = script[script.index(f"cat > {path} <<'SPOT_EVAL_EOF'\n") :].split("\n", 1)[1]
    return body[: body.index("\nSPOT_EVAL_EOF\n")]


def startup_script(r: Rendered, stack: str) -> str:
    if stack.startswith("aws"):
        return str(r.one("aws:ec2/instance:Instance").inputs["userData"])
    if stack.startswith("gcp"):
        return str(r.one("gcp:compute/instance:Instance").inputs["metadata"]["startup-script"])
    if stack.startswith("azure"):
        custom = r.one("azure-native:compute:VirtualMachine").inputs["osProfile"]["customData"]
        return base64.b64decode(custom).decode()
    data = r.one("nebius:index/computeV1Instance:ComputeV1Instance").inputs["cloudInitUserData"]
    return str(data["value"] if isinstance(data, dict) else data)


def server_argv(r: Rendered, stack: str) -> list[str]:
    template = json.loads(heredoc(startup_script(r, stack), "/etc/spot-eval/agent.template.json"))
    return list(template["server"]["command"])


@pytest.mark.parametrize("stack", VM_STACKS)
def test_vm_server_keeps_vllm_and_hf_caches_on_the_weights_disk(stack: str) -> None:
    argv = server_argv(rendered(stack), stack)
    assert argv[:2] == ["docker", "run"]
    image_at = argv.index(IMAGE)  # the pinned release, and docker's options before it
    options = argv[2:image_at]
    assert f"--volume={CACHE_DIR}/vllm:{CONTAINER_CACHE}" in options
    assert f"--env={CACHE_ENV}={CONTAINER_CACHE}" in options
    assert f"--volume={CACHE_DIR}/huggingface:/root/.cache/huggingface" in options
    assert not any(a.startswith("--load-format") for a in argv)  # `auto` is vLLM's default: not passed


@pytest.mark.parametrize("stack", VM_STACKS)
def test_vm_container_images_live_on_the_weights_disk_mounted_before_docker(stack: str) -> None:
    prepare = heredoc(startup_script(rendered(stack), stack), "/opt/spot-eval/prepare")
    assert 'mkdir -p "$CACHE/huggingface" "$CACHE/vllm"' in prepare
    assert "d['data-root']=sys.argv[1]" in prepare and '"$CACHE/docker"' in prepare
    assert f'RequiresMountsFor=%s\\n\' "$CACHE" > {DOCKER_DROP_IN}' in prepare
    assert "LABEL=spoteval-cache $CACHE ext4 defaults,noatime,nofail 0 2" in prepare
    # the data root moves once: only while docker's root is elsewhere is docker restarted
    assert '[ "$(docker info -f "{{.DockerRootDir}}" 2>/dev/null)" != "$CACHE/docker" ]' in prepare
    assert prepare.index("mount -o defaults,noatime") < prepare.index("systemctl restart docker")


def test_kubernetes_server_keeps_its_caches_on_the_claim_and_pulls_only_when_absent() -> None:
    r = rendered("k8s-gke")
    pod = r.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"HF_HOME": f"{CACHE_MOUNT}/huggingface", CACHE_ENV: f"{CACHE_MOUNT}/vllm"}
    [mount] = container["volumeMounts"]
    assert mount["mountPath"] == CACHE_MOUNT
    [claim] = [
        c for c in r.of_type("kubernetes:core/v1:PersistentVolumeClaim") if c.name.endswith("-weights-cache")
    ]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"]["claimName"] == claim.inputs["metadata"]["name"]


def test_runpod_server_installs_vllm_once_and_keeps_its_caches_on_the_network_volume() -> None:
    pod = next(
        d.inputs
        for d in rendered("runpod-eu").resources
        if d.name.endswith("-pod") and "docker_args" in d.inputs
    )
    encoded = re.search(r"echo (\S+) \| base64 -d", pod["docker_args"])
    assert encoded is not None
    script = base64.b64decode(encoded.group(1)).decode()
    raw = json.loads(re.search(r"echo '(\{.*\})' \| sed", script).group(1))  # type: ignore[union-attr]
    command = raw["server"]["command"][-1]
    venv = f"{RUNPOD_CACHE}/vllm-{VERSION}"
    assert f"[ -x {venv}/bin/vllm ] ||" in command  # installed once, on the volume
    assert f"pip install -q vllm=={VERSION}" in command
    assert f"VLLM_CACHE_ROOT={RUNPOD_CACHE}/vllm HF_HOME={RUNPOD_CACHE}/huggingface" in command
    assert f"exec {venv}/bin/vllm serve" in command


@pytest.mark.parametrize("load_format", sorted(set(LOAD_FORMATS) - {"auto"}))
def test_load_format_reaches_vllm_on_every_kind_of_command(load_format: str) -> None:
    argv = server_argv(variant("aws-us-east-1", load_format=load_format), "aws-us-east-1")
    assert argv[-1] == f"--load-format={load_format}"
    pod = variant("k8s-gke", load_format=load_format).one("kubernetes:apps/v1:Deployment").inputs
    assert pod["spec"]["template"]["spec"]["containers"][0]["command"][-1] == f"--load-format={load_format}"


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"load_format": "tensorrt"}, "server.load_format: 'tensorrt' is not one of auto, safetensors"),
        ({"command": ["python3", "-m", "my_server"]}, "server.load_format: is vLLM's --load-format"),
    ],
)
def test_a_bad_load_format_is_refused_naming_the_key(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(RenderError, match=re.escape(problem)):
        variant("aws-us-east-1", **{"load_format": "runai_streamer", **changes})


def test_every_stack_file_runs_the_pinned_release() -> None:
    for path in STACKS.values():
        text = Path(path).read_text(encoding="utf-8")
        versions = set(re.findall(r"vllm(?:/vllm-openai:v|==)(\d+\.\d+\.\d+)", text))
        assert versions == {VERSION}, path
