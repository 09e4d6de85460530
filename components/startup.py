"""What runs on the node: the agent's config and the VM startup script, as pure functions of settings.

The startup script (AWS user data, GCP `startup-script` metadata, Azure cloud-init custom data)
installs a systemd service, `spot-eval-agent.service`, and starts it. Before every start of the
service (so after every boot, including a restart after a preemption) `/opt/spot-eval/prepare`:

1. writes `/var/lib/spot-eval/boot.json` = `{"boot_time": RFC 3339 (kernel boot, from /proc/stat
   btime), "startup_script_started": RFC 3339}`, which the agent reads for its `ready` timings;
2. formats (first boot only) and mounts the weights-cache disk at `/mnt/spot-eval-cache`
   (`HF_HOME` points there, and `{cache_dir}` in `server.command` is that folder: the stacks keep
   the Hugging Face cache and vLLM's caches in it), and puts docker's image store there
   (`image_store_lines`), so a restart on the same disk pulls no layer again;
3. creates `/opt/spot-eval/venv` and installs obstore into it;
4. fetches the agent bundle (`spot-eval/agent-bundle.zip` in the result bucket) to
   `/opt/spot-eval/agent-bundle.zip` and unpacks it into a fresh `/opt/spot-eval/bundle/`, which the
   service puts on `PYTHONPATH` (the user's eval project is its `eval/` folder; its requirements are
   installed by the agent into a venv on the cache disk, `/mnt/spot-eval-cache/venvs/`: see
   spoteval/agent/evalenv.py);
5. writes `/etc/spot-eval/agent.json` from the template with this node's id and zone, read from the
   instance metadata service;
6. registers the run's manifest with `python -m spoteval.agent manifest` (create-only) when the stack
   names one.

The service runs `python -m spoteval.agent --config /etc/spot-eval/agent.json` with
`KillMode=mixed` (SIGTERM to the agent only; it stops its own children) and a `TimeoutStopSec`
a few seconds inside the provider's notice. No credentials are written anywhere: the node reads the
bucket with its instance identity.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

from components import pool_stop
from components.base import stack_base
from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.eval_settings import NODE_PACKAGES, resolve_eval, stages_manifest
from components.settings import Settings, SettingsError
from spoteval.agent import exits
from spoteval.agent.config import build_agent_config
from spoteval.harness import names_harness
from spoteval.harness.shards import episode_command
from spoteval.harness.shipping import ResolvedEval
from spoteval.providers import AWS, AZURE, BY_KEY, GCP, NEBIUS, STOP_MARGIN_S, VM_KEYS
from spoteval.store import OBSTORE_REQUIREMENT as OBSTORE_REQUIREMENT  # noqa: PLC0414 (re-exported)

SERVICE: Final = "spot-eval-agent.service"
CACHE_DIR: Final = "/mnt/spot-eval-cache"
BOOT_FILE: Final = "/var/lib/spot-eval/boot.json"
CONFIG_FILE: Final = "/etc/spot-eval/agent.json"
TEMPLATE_FILE: Final = "/etc/spot-eval/agent.template.json"
BUNDLE_FILE: Final = "/opt/spot-eval/agent-bundle.zip"
#: the unpacked bundle the agent runs from (replaced at every start)
BUNDLE_DIR: Final = "/opt/spot-eval/bundle"
#: a container's unpacked bundle (Kubernetes, Runpod)
CONTAINER_BUNDLE_DIR: Final = "/tmp/spot-eval-bundle"
VENV: Final = "/opt/spot-eval/venv"
#: the eval requirements' venvs on a VM: the weights-cache disk, kept across preemptions
VM_VENVS_DIR: Final = f"{CACHE_DIR}/venvs"
#: a Kubernetes agent pod's: its spool volume (a PVC per Job index), kept across the pod's restarts
K8S_VENVS_DIR: Final = "/var/lib/spot-eval/spool/.venvs"
#: the interpreter of a VM's agent (the venv with obstore and the harness) and of a container's
VM_PYTHON: Final = f"{VENV}/bin/python"
CONTAINER_PYTHON: Final = "python3"
#: stands for the node's id in the config template until the node knows it
NODE_ID_PLACEHOLDER: Final = "@NODE_ID@"
#: AWS refuses user data above 16 KB (before base64)
AWS_USER_DATA_LIMIT: Final = 16 * 1024
_EOF: Final = "SPOT_EVAL_EOF"


def stop_timeout_s(settings: Settings) -> int:
    """Seconds the agent's service gets between SIGTERM and SIGKILL: inside the provider's notice."""
    return max(STOP_MARGIN_S, settings.notice_s - STOP_MARGIN_S)


def server_command(settings: Settings, cache_dir: str = CACHE_DIR) -> list[str]:
    """`server.command` with `{model}`, `{port}` and `{cache_dir}` filled in, and vLLM's
    `--load-format` when `server.load_format` asks for one other than vLLM's default (`auto`)."""
    values = {"model": settings.server.model, "port": str(settings.server.port), "cache_dir": cache_dir}
    out: list[str] = []
    for arg in settings.server.command:
        filled = arg
        for name, value in values.items():
            filled = filled.replace("{" + name + "}", value)
        out.append(filled)
    return with_load_format(out, settings.server.load_format)


def with_load_format(argv: list[str], load_format: str | None) -> list[str]:
    """The server's argv with `--load-format=X` at its end (inside a `bash -c SCRIPT`'s script)."""
    if load_format is None or load_format == "auto":
        return argv
    flag = f"--load-format={load_format}"
    shell = len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in ("bash", "sh") and argv[-2].startswith("-")
    if shell and "c" in argv[-2]:
        return [*argv[:-1], f"{argv[-1]} {flag}"]
    return [*argv, flag]


def node_eval(settings: Settings) -> ResolvedEval:
    """The stack's eval as the node runs it: the task inside the bundle, the agent's eval_env."""
    return resolve_eval(settings.eval.harness, settings.eval.project, stack_base(settings), SettingsError)


def episodes_command(settings: Settings) -> tuple[str, ...]:
    """`eval.command`, or the harness's shard runner (the drill's: spoteval.harness.shards) with the
    task as the bundle holds it and the server block's model, run by `{python}` (the eval env's venv,
    else the agent's interpreter); the runner calls the harness with `{model_url}/v1`."""
    harness = settings.eval.harness
    if harness is None:
        return settings.eval.command
    resolved = node_eval(settings)
    block = harness.block(settings.server.model, task=resolved.node_task, options=resolved.node_options)
    return tuple(episode_command(block))


def has_manifest(settings: Settings) -> bool:
    return stages_manifest(settings.eval.harness, settings.eval.manifest)


#: The agent's `pool` section for the nodes of a pool (batch of claims, lease renewal and expiry).
POOL_DEFAULTS: Final[Mapping[str, Any]] = {"batch": 16, "renew_s": 10, "expiry_s": 45}


def _pool_section(settings: Settings) -> dict[str, Any] | None:
    """The agent's `pool` section for a pool's nodes, with the group it scales to zero when done."""
    if not settings.node.pool:
        return None
    target = pool_stop.agent_target(settings)
    return {**POOL_DEFAULTS, **({"scale_to_zero": target} if target else {})}


def stack_config_args(settings: Settings, venvs_dir: str = VM_VENVS_DIR) -> dict[str, Any]:
    """What every node's agent config takes from the stack's settings (build_agent_config's keywords);
    `venvs_dir` holds the eval requirements' venvs (the node's cache disk)."""
    return {
        "run_id": settings.run_id,
        "provider": settings.provider,
        "region": settings.region,
        "instance_type": settings.node.instance_type,
        "market": settings.node.market,
        "health_path": settings.server.health_path,
        "ready_timeout_s": settings.server.ready_timeout_s,
        "episodes_command": episodes_command(settings),
        "concurrency": settings.eval.concurrency,
        "max_attempts": settings.eval.max_attempts,
        "timeout_s": settings.eval.timeout_s,
        "on_done": settings.stop.on_done,
        "max_runtime_s": settings.stop.max_runtime_s,
        "idle_s": settings.stop.idle_s,
        "budget": settings.grant.budget,
        "price_cap": settings.grant.price_cap,
        "heartbeat_s": settings.eval.heartbeat_s,
        "currency": settings.grant.currency,
        # a pool (node.count > 1): the nodes divide the episodes through claims in the run record
        "pool": _pool_section(settings),
        # the user's eval project and requirements (spoteval/agent/evalenv.py)
        "eval_env": node_eval(settings).agent_eval_env(venvs_dir),
    }


def agent_config(
    settings: Settings,
    *,
    store_url: str,
    node_id: str = NODE_ID_PLACEHOLDER,
    server_url: str | None = None,
    external_server: bool = False,
) -> dict[str, Any]:
    """The node agent's config (see spoteval/agent/config.py) for this stack.

    `store_url` is the run record's store (the bucket URL). On Kubernetes the model server runs in its
    own Deployment (`external_server=True`): the agent only waits for it at `server_url`.
    """
    facts = BY_KEY[settings.provider]
    # The node reads its own price where the provider has an API for it (the configured one otherwise).
    node_reads_price = facts.price is not None and bool(facts.price.node_markets)
    return build_agent_config(
        **stack_config_args(settings, VM_VENVS_DIR if settings.provider in VM_KEYS else K8S_VENVS_DIR),
        store=store_url,
        node_id=node_id,
        zone=settings.zone,
        server_url=server_url or f"http://127.0.0.1:{settings.server.port}",
        server_command=None if external_server else server_command(settings),
        sigterm_grace_s=max(1, stop_timeout_s(settings) - STOP_MARGIN_S),
        metadata_url=facts.metadata.base_url if facts.metadata is not None else None,
        price_per_hour=None if node_reads_price else settings.configured_price,
    )


def object_url(store_url: str, key: str) -> str:
    return store_url.rstrip("/") + "/" + key


# --- the node helper (runs on the node with python3 >= 3.10, standard library or obstore) ---------

_NODE_PY: Final = r'''
import json, os, sys, time, urllib.request
from datetime import datetime, timezone

PROVIDER = @PROVIDER@


def rfc3339(t):
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def boot(path):
    started = datetime.now(timezone.utc)
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    data = {"boot_time": rfc3339(datetime.fromtimestamp(btime, timezone.utc)),
            "startup_script_started": rfc3339(started)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def http(url, headers, method="GET"):
    req = urllib.request.Request(url, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode().strip()


def identity(base):
    """(node id, zone) from the instance metadata service at `base` (the agent's metadata_url)."""
    if PROVIDER == "aws":
        token = http(base + @AWS_TOKEN_PATH@, {@AWS_TTL_HEADER@: "300"}, "PUT")
        h = {@AWS_TOKEN_HEADER@: token}
        return (http(base + @AWS_ID_PATH@, h),
                http(base + @AWS_ZONE_PATH@, h))
    if PROVIDER == "nebius":  # regions only, no zones
        return json.loads(http(base + @NEBIUS_DATA_PATH@, @NEBIUS_HEADERS@))["id"], ""
    if PROVIDER == "gcp":
        base += @GCP_INSTANCE_PATH@
        h = @GCP_HEADERS@
        return http(base + "name", h), http(base + "zone", h).rsplit("/", 1)[-1]
    base += @AZURE_COMPUTE_PATH@
    h = @AZURE_HEADERS@
    q = @AZURE_TEXT_QUERY@
    return http(base + "name" + q, h), http(base + "zone" + q, h)


def config(template, out):
    with open(template) as f:
        cfg = json.load(f)
    node_id = zone = None
    for attempt in range(30):
        try:
            node_id, zone = identity(cfg["metadata_url"].rstrip("/"))
            break
        except OSError as exc:
            print(f"metadata not answering yet: {exc}", file=sys.stderr)
            time.sleep(2)
    if not node_id:
        sys.exit("no node id from the metadata service")
    cfg["node"]["id"] = node_id
    if zone:
        cfg["node"]["zone"] = zone
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=1)
    os.replace(tmp, out)


def fetch(url, out):
    import obstore
    from obstore.store import from_url

    scheme, rest = url.split("://", 1)
    bucket, key = rest.split("/", 1)
    delay = 2.0
    for attempt in range(12):  # the node's identity may take a minute to reach the bucket
        try:
            data = bytes(obstore.get(from_url(f"{scheme}://{bucket}"), key).bytes())
            break
        except Exception as exc:
            print(f"fetch {url}: {str(exc).splitlines()[0][:200]}", file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    else:
        sys.exit(f"fetch {url}: gave up")
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"boot": boot, "config": config, "fetch": fetch}[command](*args)
'''


def _node_facts() -> dict[str, object]:
    """The metadata facts the node helper needs (spoteval/providers.py), by placeholder."""
    aws, gcp, azure, nebius = AWS.metadata, GCP.metadata, AZURE.metadata, NEBIUS.metadata
    assert aws is not None and gcp is not None and azure is not None and nebius is not None
    return {
        "AWS_TOKEN_PATH": aws.paths["token"],
        "AWS_TTL_HEADER": aws.token_ttl_header,
        "AWS_TOKEN_HEADER": aws.token_header,
        "AWS_ID_PATH": aws.paths["instance_id"],
        "AWS_ZONE_PATH": aws.paths["zone"],
        "NEBIUS_DATA_PATH": nebius.paths["instance_data"],
        "NEBIUS_HEADERS": dict(nebius.headers),
        "GCP_INSTANCE_PATH": gcp.paths["instance"],
        "GCP_HEADERS": dict(gcp.headers),
        "AZURE_COMPUTE_PATH": azure.paths["compute"],
        "AZURE_HEADERS": dict(azure.headers),
        "AZURE_TEXT_QUERY": azure.paths["text_query"],
    }


def _node_py(provider: str) -> str:
    """The node helper with the provider and the metadata facts written in as Python literals."""
    text = _NODE_PY.replace("@PROVIDER@", repr(provider))
    for name, value in _node_facts().items():
        text = text.replace(f"@{name}@", json.dumps(value))
    return text.lstrip("\n")


def _prepare(settings: Settings, cache_device: str | None, manifest: bool) -> str:
    lines = [
        "#!/bin/bash",
        "# Runs before every start of the agent (ExecStartPre): boot timestamps, cache disk, bundle, config.",
        "set -euo pipefail",
        f"python3 /opt/spot-eval/node.py boot {BOOT_FILE}",
        f"CACHE={CACHE_DIR}",
        f"DEV={shlex.quote(cache_device or '')}",
        'mkdir -p "$CACHE"',
        'if [ -n "$DEV" ] && ! mountpoint -q "$CACHE"; then',
        '  for i in $(seq 1 90); do [ -e "$DEV" ] && break; sleep 2; done',
        '  [ -e "$DEV" ] || { echo "cache disk $DEV did not appear" >&2; exit 1; }',
        '  blkid "$DEV" >/dev/null 2>&1 || mkfs.ext4 -q -L spoteval-cache "$DEV"',
        '  mount -o defaults,noatime "$DEV" "$CACHE"',
        "fi",
        'mkdir -p "$CACHE/huggingface" "$CACHE/vllm" /var/lib/spot-eval/spool',
        *image_store_lines(),
        f"if [ ! -x {VENV}/bin/python ]; then",
        f"  python3 -m venv {VENV} || {{ apt-get update -qq && apt-get install -y -qq python3-venv"
        f" && python3 -m venv {VENV}; }}",
        "fi",
        f"{VENV}/bin/python -c 'import obstore' 2>/dev/null"
        f" || {VENV}/bin/pip install -q --disable-pip-version-check '{OBSTORE_REQUIREMENT}'",
        f'{VENV}/bin/python /opt/spot-eval/node.py fetch "$SPOT_EVAL_BUNDLE_URL" {BUNDLE_FILE}',
        unpack_bundle(f"{VENV}/bin/python", BUNDLE_FILE, BUNDLE_DIR),
        *harness_install(settings),
        f"python3 /opt/spot-eval/node.py config {TEMPLATE_FILE} {CONFIG_FILE}",
    ]
    if manifest:
        manifest_file = "/var/lib/spot-eval/manifest.jsonl"
        lines += [
            f'{VENV}/bin/python /opt/spot-eval/node.py fetch "$SPOT_EVAL_MANIFEST_URL" {manifest_file}',
            f"PYTHONPATH={BUNDLE_DIR} {VENV}/bin/python -m spoteval.agent manifest --config {CONFIG_FILE}"
            f" {manifest_file}",
        ]
    return "\n".join(lines) + "\n"


#: docker's drop-in: the engine starts only once the weights disk is mounted (its images live there)
DOCKER_DROP_IN: Final = "/etc/systemd/system/docker.service.d/spot-eval-cache.conf"


def image_store_lines() -> list[str]:
    """The container images on the weights disk: docker's `data-root` is `$CACHE/docker`, the disk
    is mounted at boot (fstab, by its label) before docker starts, so a restart on the same disk
    pulls no layer again. Done once (the first boot restarts docker); nothing without docker."""
    merge = (
        "import json,os,sys; p='/etc/docker/daemon.json'; "
        "d=json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else {}; "
        "d['data-root']=sys.argv[1]; open(p,'w').write(json.dumps(d, indent=1))"
    )
    return [
        'if [ -n "$DEV" ] && ! grep -q "LABEL=spoteval-cache" /etc/fstab; then',
        '  echo "LABEL=spoteval-cache $CACHE ext4 defaults,noatime,nofail 0 2" >> /etc/fstab',
        "fi",
        "if command -v dockerd >/dev/null 2>&1 && "
        '[ "$(docker info -f "{{.DockerRootDir}}" 2>/dev/null)" != "$CACHE/docker" ]; then',
        f'  mkdir -p /etc/docker "$CACHE/docker" {DOCKER_DROP_IN.rsplit("/", 1)[0]}',
        f"  printf '[Unit]\\nRequiresMountsFor=%s\\n' \"$CACHE\" > {DOCKER_DROP_IN}",
        f'  python3 -c "{merge}" "$CACHE/docker"',
        "  systemctl daemon-reload && systemctl restart docker",
        "fi",
    ]


def unpack_bundle(python: str, archive: str, folder: str) -> str:
    """The line that unpacks the bundle into a fresh `folder` (it runs from the zip itself)."""
    return f"PYTHONPATH={archive} {python} -m spoteval.bundle unpack {archive} {folder}"


def harness_install(settings: Settings, python: str = VM_PYTHON) -> list[str]:
    """The harness, installed (once per node) for the interpreter that runs its shards, unless the
    eval's requirements install it into their venv (spoteval/agent/evalenv.py)."""
    if settings.eval.harness is None:
        return []
    env = node_eval(settings).eval_env or {}
    lines = list(env.get("requirements") or [])
    if "requirements_file" in env:
        project = node_eval(settings).project
        assert project is not None and project.requirements_file is not None
        lines = (project.root / project.requirements_file).read_text(encoding="utf-8").splitlines()
    if names_harness(settings.eval.harness.name, lines):
        return []
    module, requirement = NODE_PACKAGES[settings.eval.harness.name]
    return [
        f"{python} -c 'import {module}' 2>/dev/null"
        f" || {python} -m pip install -q --disable-pip-version-check '{requirement}'"
    ]


def _unit(settings: Settings) -> str:
    return "\n".join(
        [
            "[Unit]",
            f"Description=spot-eval node agent (run {settings.run_id})",
            "Wants=network-online.target",
            "After=network-online.target docker.service",
            # A node that cannot start its agent (bundle, config, manifest refused) gives up after
            # 10 tries in an hour rather than looping on the bill; the record shows no `start`.
            "StartLimitIntervalSec=3600",
            "StartLimitBurst=10",
            "",
            "[Service]",
            "Type=simple",
            "EnvironmentFile=/etc/spot-eval/env",
            f"Environment=PYTHONPATH={BUNDLE_DIR}",
            "ExecStartPre=/opt/spot-eval/prepare",
            f"ExecStart={VENV}/bin/python -m spoteval.agent --config {CONFIG_FILE}",
            # SIGTERM to the agent only: it records and stops its own children within the notice.
            "KillMode=mixed",
            "KillSignal=SIGTERM",
            "TimeoutStartSec=1800",
            f"TimeoutStopSec={stop_timeout_s(settings)}",
            # on-failure includes exit 75, "the store did not answer at start" (spoteval/agent/exits.py):
            # a node that comes back during a store outage keeps trying (at most StartLimitBurst an hour).
            "Restart=on-failure",
            # exit 3: every episode ended in a harness error; starting again cannot help
            f"RestartPreventExitStatus={exits.HARNESS_ERRORS}",
            "RestartSec=15",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def _heredoc(path: str, body: str, mode: str | None = None) -> str:
    if _EOF in body:
        raise ValueError(f"{path}: content contains the heredoc marker {_EOF}")
    text = f"cat > {path} <<'{_EOF}'\n{body if body.endswith(chr(10)) else body + chr(10)}{_EOF}\n"
    if mode:
        text += f"chmod {mode} {path}\n"
    return text


def environment(
    settings: Settings, *, store_url: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Variables of the agent's service (no secrets: identities come from the instance)."""
    env = {
        "SPOT_EVAL_BUNDLE_URL": object_url(store_url, OBJECT_KEY),
        "HF_HOME": f"{CACHE_DIR}/huggingface",
        "SPOT_EVAL_CACHE_DIR": CACHE_DIR,
    }
    if has_manifest(settings):
        env["SPOT_EVAL_MANIFEST_URL"] = object_url(store_url, MANIFEST_KEY)
    if settings.provider == "aws":
        env["AWS_REGION"] = settings.region
        env["AWS_DEFAULT_REGION"] = settings.region
    env.update(extra or {})
    for key, value in env.items():
        if "\n" in value or not key.replace("_", "").isalnum():
            raise ValueError(f"environment {key}={value!r} cannot go into an EnvironmentFile")
    return env


def render_startup_script(
    settings: Settings,
    *,
    store_url: str,
    cache_device: str | None,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """The VM's first-boot script (bash). `cache_device` is the weights-cache disk's device path."""
    if settings.provider not in VM_KEYS:
        raise ValueError(f"no startup script for provider {settings.provider!r}")
    config = agent_config(settings, store_url=store_url)
    env = environment(settings, store_url=store_url, extra=extra_env)
    parts = [
        "#!/bin/bash\n",
        f"# spot-eval node startup for run {settings.run_id} ({settings.provider} {settings.node.market}),"
        " rendered by components/startup.py.\n",
        "# Installs spot-eval-agent.service; /opt/spot-eval/prepare runs before every start of it.\n",
        "set -euo pipefail\n",
        "umask 022\n",
        "install -d -m 0755 /etc/spot-eval /opt/spot-eval /var/lib/spot-eval\n",
        _heredoc(TEMPLATE_FILE, json.dumps(config, indent=1, sort_keys=True)),
        _heredoc("/etc/spot-eval/env", "".join(f"{k}={v}\n" for k, v in sorted(env.items()))),
        _heredoc("/opt/spot-eval/node.py", _node_py(settings.provider)),
        _heredoc("/opt/spot-eval/prepare", _prepare(settings, cache_device, has_manifest(settings)), "0755"),
        _heredoc(f"/etc/systemd/system/{SERVICE}", _unit(settings)),
        "systemctl daemon-reload\n",
        f"systemctl enable {SERVICE}\n",
        f"systemctl start --no-block {SERVICE}\n",
    ]
    return "".join(parts)


def render_shutdown_script(settings: Settings) -> str:
    """GCP `shutdown-script`: SIGTERM to the agent (not its children), then wait inside the notice."""
    wait = stop_timeout_s(settings)
    return "\n".join(
        [
            "#!/bin/bash",
            "# spot-eval: tell the agent the capacity is going away (it records the notice and flushes).",
            f"pid=$(systemctl show -p MainPID --value {SERVICE} 2>/dev/null || echo 0)",
            '[ "${pid:-0}" -gt 0 ] && kill -TERM "$pid" || exit 0',
            f"for i in $(seq 1 {wait}); do systemctl is-active --quiet {SERVICE} || exit 0; sleep 1; done",
            "",
        ]
    )


def k8s_agent_command(
    config_path: str, bundle_path: str, manifest_path: str | None, install: Sequence[str] = ()
) -> list[str]:
    """The Job container's command: `install` (the harness), the pod's name as node id, the bundle
    unpacked into a fresh folder, register the manifest, exec the agent."""
    config = '"${TMPDIR:-/tmp}/agent.json"'
    script = [
        "set -eu",
        "python3 -c 'import obstore' 2>/dev/null"
        f" || pip install -q --disable-pip-version-check '{OBSTORE_REQUIREMENT}'",
        f'sed "s/{NODE_ID_PLACEHOLDER}/$POD_NAME/" {shlex.quote(config_path)} > {config}',
        *install,
        unpack_bundle("python3", shlex.quote(bundle_path), CONTAINER_BUNDLE_DIR),
        f"export PYTHONPATH={CONTAINER_BUNDLE_DIR}",
    ]
    if manifest_path:
        script.append(f"python3 -m spoteval.agent manifest --config {config} {shlex.quote(manifest_path)}")
    script.append(f"exec python3 -m spoteval.agent --config {config}")
    return ["/bin/sh", "-c", "\n".join(script)]
