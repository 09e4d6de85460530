"""The node side of a stack: the agent's config, the startup script and the helpers it installs,
run for real where they can be (boot timestamps, metadata, bucket fetch, the shutdown signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from components.bundle import OBJECT_KEY, build_bundle
from components.settings import Settings
from components.startup import (
    AWS_USER_DATA_LIMIT,
    NODE_ID_PLACEHOLDER,
    agent_config,
    k8s_agent_command,
    render_shutdown_script,
    render_startup_script,
    stop_timeout_s,
    unpack_bundle,
)
from spoteval.agent.config import parse as parse_agent_config
from spoteval.providers import BY_KEY, K8S_FLAVOURS
from spoteval.record import parse_time
from tests import servers
from tests.test_settings import parse_with


def metadata_base(provider: str) -> str:
    metadata = BY_KEY[provider].metadata
    assert metadata is not None
    return metadata.base_url


def notice_s(provider: str) -> int:
    notice = BY_KEY[provider].notice_s
    assert notice is not None
    return notice


VM_STACKS = {"aws": "aws-us-east-1", "gcp": "gcp-us-central1", "azure": "azure-eastus"}
STORE = {"aws": "s3://results-bucket", "gcp": "gs://results-bucket", "azure": "az://seresults"}
DEVICE = "/dev/disk/by-id/google-spot-eval-cache"


def script_for(provider: str, **changes: Any) -> tuple[Settings, str]:
    settings = parse_with(VM_STACKS[provider], **changes)
    return settings, render_startup_script(settings, store_url=STORE[provider], cache_device=DEVICE)


def heredocs(script: str) -> dict[str, str]:
    """The files a startup script writes (`cat > PATH <<'MARK' ... MARK`)."""
    files: dict[str, str] = {}
    lines = script.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("cat > ") and "<<'" in line:
            path = line.split()[2]
            mark = line.split("<<'")[1].split("'")[0]
            body: list[str] = []
            i += 1
            while lines[i].rstrip("\n") != mark:
                body.append(lines[i])
                i += 1
            files[path] = "".join(body)
        i += 1
    return files


# --- the agent's config ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(VM_STACKS))
def test_agent_config_is_accepted_by_the_agent(provider: str) -> None:
    settings, script = script_for(provider)
    template = json.loads(heredocs(script)["/etc/spot-eval/agent.template.json"])
    assert template["node"]["id"] == NODE_ID_PLACEHOLDER
    config = parse_agent_config({**template, "node": {**template["node"], "id": "node-1"}})
    assert config.run_id == settings.run_id
    assert config.store == STORE[provider]
    assert config.node.provider == provider and config.node.market == "spot"
    assert config.node.region == settings.region and config.node.instance_type == settings.node.instance_type
    assert config.metadata_url == metadata_base(provider)
    assert config.server.url == "http://127.0.0.1:8000"
    assert "--model=" + settings.server.model in config.server.command
    assert "--volume=/mnt/spot-eval-cache/huggingface:/root/.cache/huggingface" in config.server.command
    assert config.episodes.command == settings.eval.command
    assert config.episodes.concurrency == 32
    assert config.stop_rules.max_runtime_s == settings.stop.max_runtime_s
    assert config.stop_rules.idle_s == settings.stop.idle_s
    assert config.stop_rules.budget == settings.grant.budget
    assert config.stop_rules.on_done == settings.stop.on_done
    assert config.sigterm_grace_s is not None and config.sigterm_grace_s < notice_s(provider)


def test_price_is_configured_only_where_the_agent_cannot_read_it() -> None:
    aws = agent_config(parse_with("aws-us-east-1"), store_url="s3://b")
    gcp = agent_config(parse_with("gcp-us-central1"), store_url="gs://b")
    gcp_on_demand = agent_config(parse_with("gcp-us-central1", node__market="on_demand"), store_url="gs://b")
    assert "price" not in aws
    assert gcp["price"] == {"per_hour": 0.34, "currency": "USD"}
    assert gcp_on_demand["price"] == {"per_hour": 0.854, "currency": "USD"}


def test_kubernetes_agent_waits_for_the_server_deployment() -> None:
    settings = parse_with("k8s-gke")
    raw = agent_config(
        settings, store_url="gs://b", server_url="http://s.ns.svc.cluster.local:8000", external_server=True
    )
    config = parse_agent_config({**raw, "node": {**raw["node"], "id": "pod-0"}})
    assert config.server.command == ()
    assert config.server.url == "http://s.ns.svc.cluster.local:8000"
    assert config.metadata_url is None
    assert config.stop_rules.on_done == "exit"
    assert config.price is not None and config.price.per_hour == 0.34


# --- the script -----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(VM_STACKS))
def test_startup_script_is_valid_bash_and_installs_the_service(provider: str, tmp_path: Path) -> None:
    settings, script = script_for(provider)
    files = heredocs(script)
    for name, text in {"startup.sh": script, "prepare": files["/opt/spot-eval/prepare"]}.items():
        path = tmp_path / name
        path.write_text(text)
        check = subprocess.run(["bash", "-n", str(path)], check=False, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    compile(files["/opt/spot-eval/node.py"], "node.py", "exec")
    unit = files["/etc/systemd/system/spot-eval-agent.service"]
    assert "ExecStartPre=/opt/spot-eval/prepare" in unit
    assert (
        "ExecStart=/opt/spot-eval/venv/bin/python -m spoteval.agent --config /etc/spot-eval/agent.json"
        in unit
    )
    assert "Environment=PYTHONPATH=/opt/spot-eval/bundle" in unit
    assert "KillMode=mixed" in unit
    assert f"TimeoutStopSec={stop_timeout_s(settings)}" in unit
    assert script.rstrip().endswith("systemctl start --no-block spot-eval-agent.service")


def test_stop_timeout_fits_inside_each_providers_notice() -> None:
    for provider, stack in VM_STACKS.items():
        timeout = stop_timeout_s(parse_with(stack))
        assert 0 < timeout < notice_s(provider)
    assert stop_timeout_s(parse_with("aws-us-east-1")) == 115
    assert stop_timeout_s(parse_with("gcp-us-central1")) == 25
    for flavour, facts in K8S_FLAVOURS.items():
        selector = {"pool": "gpu"} if flavour == "nebius" else None
        settings = parse_with("k8s-gke", k8s__flavour=flavour, k8s__node_selector=selector)
        assert 0 < stop_timeout_s(settings) < facts.notice_s


def test_aws_user_data_stays_under_the_16_kb_limit() -> None:
    for changes in ({}, {"node__count": 4}, {"node__market": "on_demand"}):
        _, script = script_for("aws", **changes)
        assert len(script.encode()) < AWS_USER_DATA_LIMIT
    bundle = build_bundle()
    assert bundle.size > AWS_USER_DATA_LIMIT  # why the agent travels through the bucket


@pytest.mark.parametrize("provider", sorted(VM_STACKS))
def test_no_credentials_in_the_node_environment(provider: str) -> None:
    _, script = script_for(provider)
    env = dict(line.split("=", 1) for line in heredocs(script)["/etc/spot-eval/env"].splitlines())
    assert env["SPOT_EVAL_BUNDLE_URL"] == f"{STORE[provider]}/{OBJECT_KEY}"
    assert not [k for k in env if "SECRET" in k or "KEY" in k or "TOKEN" in k or "PASSWORD" in k]
    assert "AWS_SECRET_ACCESS_KEY" not in script and "AccountKey" not in script


def test_cache_disk_is_mounted_only_when_there_is_one() -> None:
    settings = parse_with("gcp-us-central1")
    with_disk = heredocs(render_startup_script(settings, store_url="gs://b", cache_device=DEVICE))
    without = heredocs(render_startup_script(settings, store_url="gs://b", cache_device=None))
    assert f"DEV={DEVICE}" in with_disk["/opt/spot-eval/prepare"]
    assert "DEV=''" in without["/opt/spot-eval/prepare"]
    assert "mkfs.ext4" in with_disk["/opt/spot-eval/prepare"]


def test_manifest_is_registered_only_when_the_stack_names_one() -> None:
    _, named = script_for("aws")
    _, unnamed = script_for("aws", eval__manifest=None)
    assert (
        "spoteval.agent manifest --config /etc/spot-eval/agent.json"
        in heredocs(named)["/opt/spot-eval/prepare"]
    )
    assert "manifest" not in heredocs(unnamed)["/opt/spot-eval/prepare"]
    assert "SPOT_EVAL_MANIFEST_URL" not in unnamed


# --- the helper the script installs, run for real ---------------------------------------------------


def node_helper(tmp_path: Path, provider: str, metadata_url: str | None = None) -> tuple[Path, Path]:
    _, script = script_for(provider)
    files = heredocs(script)
    helper = tmp_path / "node.py"
    helper.write_text(files["/opt/spot-eval/node.py"])
    template = json.loads(files["/etc/spot-eval/agent.template.json"])
    if metadata_url is not None:
        template["metadata_url"] = metadata_url
    template_path = tmp_path / "agent.template.json"
    template_path.write_text(json.dumps(template))
    return helper, template_path


def test_boot_timestamps_are_written_for_the_agent(tmp_path: Path) -> None:
    helper, _ = node_helper(tmp_path, "aws")
    before = time.time()
    subprocess.run([sys.executable, str(helper), "boot", str(tmp_path / "boot.json")], check=True)
    boot = json.loads((tmp_path / "boot.json").read_text())
    assert set(boot) == {"boot_time", "startup_script_started"}
    booted, started = parse_time(boot["boot_time"]), parse_time(boot["startup_script_started"])
    assert booted <= started
    assert abs(started.timestamp() - before) < 30


class FakeMetadata(BaseHTTPRequestHandler):
    """Each provider's instance metadata, refusing requests without the provider's header."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(200, "token-1")
        else:
            self._send(400, "")

    def do_GET(self) -> None:
        aws = {
            "/latest/meta-data/instance-id": "i-0abc",
            "/latest/meta-data/placement/availability-zone": "us-east-1b",
        }
        gcp = {
            "/computeMetadata/v1/instance/name": "qwen7b-drill-gcp-gpu-1a2b",
            "/computeMetadata/v1/instance/zone": "projects/123/zones/us-central1-c",
        }
        path = self.path.split("?")[0]
        if path in aws:
            ok = self.headers.get("X-aws-ec2-metadata-token") == "token-1"
            self._send(200 if ok else 401, aws[path])
        elif path in gcp:
            self._send(200 if self.headers.get("Metadata-Flavor") == "Google" else 403, gcp[path])
        elif path.startswith("/metadata/instance/compute/"):
            ok = self.headers.get("Metadata") == "true" and "format=text" in self.path
            self._send(
                200 if ok else 400, {"name": "qwen3b-drill-azure-gpu", "zone": "2"}[path.rsplit("/", 1)[1]]
            )
        else:
            self._send(404, "")


@pytest.fixture(scope="module")
def metadata_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMetadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("provider", "node_id", "zone"),
    [
        ("aws", "i-0abc", "us-east-1b"),
        ("gcp", "qwen7b-drill-gcp-gpu-1a2b", "us-central1-c"),
        ("azure", "qwen3b-drill-azure-gpu", "2"),
    ],
)
def test_node_identity_comes_from_the_metadata_service(
    provider: str, node_id: str, zone: str, metadata_url: str, tmp_path: Path
) -> None:
    helper, template = node_helper(tmp_path, provider, metadata_url)
    out = tmp_path / "agent.json"
    subprocess.run([sys.executable, str(helper), "config", str(template), str(out)], check=True, timeout=60)
    config = parse_agent_config(json.loads(out.read_text()))
    assert (config.node.id, config.node.zone, config.node.provider) == (node_id, zone, provider)


def test_bundle_is_fetched_from_the_bucket_with_the_environments_identity(
    moto_server: servers.Server, tmp_path: Path
) -> None:
    bucket = "bundle-fetch"
    servers.create_s3_bucket(moto_server, bucket)
    import boto3

    bundle = build_bundle()
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.put_object(Bucket=bucket, Key=OBJECT_KEY, Body=bundle.data)
    helper, _ = node_helper(tmp_path, "aws")
    out = tmp_path / "agent-bundle.zip"
    env = {**os.environ, **moto_server.env}
    subprocess.run(
        [sys.executable, str(helper), "fetch", f"s3://{bucket}/{OBJECT_KEY}", str(out)],
        check=True,
        env=env,
        timeout=60,
    )
    assert out.read_bytes() == bundle.data
    # The zip unpacks itself (the prepare step's line) into the folder the service puts on PYTHONPATH.
    folder = tmp_path / "bundle"
    unpack = unpack_bundle(sys.executable, str(out), str(folder))
    subprocess.run(["/bin/sh", "-c", unpack], env=env, cwd=tmp_path, check=True, timeout=60)
    probe = subprocess.run(
        [sys.executable, "-c", "import spoteval.record, sys; print(spoteval.record.__file__)"],
        env={**env, "PYTHONPATH": str(folder)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == str(folder / "spoteval" / "record.py")


def test_shutdown_script_sends_sigterm_to_the_agent_only(tmp_path: Path) -> None:
    agent = subprocess.Popen(["sleep", "60"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = show ]; then echo {agent.pid}; exit 0; fi\n'
        # active while the process lives (a zombie waiting for this test to reap it is not alive)
        f'if [ "$1" = is-active ]; then s=$(cut -d" " -f3 /proc/{agent.pid}/stat 2>/dev/null);'
        ' [ -n "$s" ] && [ "$s" != Z ]; exit $?; fi\n'
        "exit 1\n"
    )
    (fake / "systemctl").chmod(0o755)
    script = tmp_path / "shutdown.sh"
    script.write_text(render_shutdown_script(parse_with("gcp-us-central1")))
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(script)],
        check=False,
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
        timeout=30,
    )
    agent.wait(timeout=5)
    assert done.returncode == 0
    assert agent.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 10


def test_kubernetes_pod_fills_in_its_name_and_runs_the_agent(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "python3.log"
    (fake / "python3").write_text(f'#!/bin/bash\necho "$@" >> {log}\nexit 0\n')
    (fake / "python3").chmod(0o755)
    (tmp_path / "configmap").mkdir()
    config = tmp_path / "configmap" / "agent.json"
    config.write_text(json.dumps({"node": {"id": NODE_ID_PLACEHOLDER}}))
    command = k8s_agent_command(
        str(config), "/etc/spot-eval/agent-bundle.zip", "/etc/spot-eval/manifest.jsonl"
    )
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "POD_NAME": "run-episodes-0-x7k2",
        "TMPDIR": str(tmp_path),
    }
    subprocess.run(command, env=env, check=True, timeout=30)
    rendered = json.loads((tmp_path / "agent.json").read_text())
    assert rendered["node"]["id"] == "run-episodes-0-x7k2"
    calls = log.read_text().splitlines()
    assert (
        calls[-2]
        == f"-m spoteval.agent manifest --config {tmp_path}/agent.json /etc/spot-eval/manifest.jsonl"
    )
    assert calls[-1] == f"-m spoteval.agent --config {tmp_path}/agent.json"


def test_the_nodes_of_a_pool_get_the_pool_section_and_a_single_node_none() -> None:
    single = agent_config(parse_with("aws-us-east-1"), store_url="s3://b/p")
    pool = agent_config(parse_with("aws-us-east-1", node__count=3), store_url="s3://b/p")
    assert "pool" not in single and parse_agent_config(single).pool is None
    target = {"engine": "aws_asg", "name": "qwen7b-drill-aws-pool", "region": "us-east-1"}
    assert pool["pool"] == {"batch": 16, "renew_s": 10, "expiry_s": 45, "scale_to_zero": target}
    settings = parse_agent_config(pool).pool
    assert settings is not None and (settings.batch, settings.renew_s, settings.expiry_s) == (16, 10.0, 45.0)
