"""Scale this node's pool to zero through its engine, once the run is done (the agent's
`pool.scale_to_zero` section; standard library only, as the rest of the agent).

A pool's engine replaces a node that powers itself off (and bills a new boot each time), so the node
that finds the run done asks the engine itself for zero nodes, after its `stop` event is durable:

- `aws_asg`: `UpdateAutoScalingGroup` with `MinSize=0` and `DesiredCapacity=0`, a Query API call
  signed with Signature Version 4 (`spoteval/agent/aws_price.py`'s signer) with the instance role's
  credentials from IMDSv2 (or the standard AWS_* variables);
- `gcp_mig`: `regionInstanceGroupManagers.resize` with `size=0`, with the VM's service account token
  from the metadata server;
- `azure_vmss`: a PATCH of the scale set with `sku.capacity: 0`, with the managed identity's token
  from IMDS;
- `k8s_deployment`: the model server's Deployment scaled to 0 replicas (`deployments/{name}/scale`,
  merge patch) with the pod's service account token: the model server goes with the episodes.

Every node of the pool that finds the run done asks the same (the calls are idempotent). The URLs,
API versions and credentials are facts in spoteval/pool_engines.py (`POOL_SCALE`); the stack gives
the node the permission for its own group only (components/pool_stop.py). `endpoint` and the
agent's `metadata_url` point the calls at loopback servers in tests.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Final

from spoteval.agent.notices import Reply, http
from spoteval.apis.imds import credentials
from spoteval.apis.sigv4 import sign_query_get
from spoteval.pool_engines import POOL_SCALE
from spoteval.providers import AZURE, GCP

#: engine -> the config fields its call needs (besides `engine`)
REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "aws_asg": ("name", "region"),
    "gcp_mig": ("name", "project", "region"),
    "azure_vmss": ("name", "resource_group"),  # the subscription: the config's, else the VM's (IMDS)
    "k8s_deployment": ("name", "namespace"),
}
FIELDS: Final = (
    "engine",
    "name",
    "region",
    "project",
    "subscription",
    "resource_group",
    "namespace",
    "endpoint",
)
_BY_ENGINE: Final = {p.engine: p for p in POOL_SCALE.values()}
_K8S_CA: Final = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


@dataclass(frozen=True)
class ScaleTarget:
    """The node's own group, as the stack wrote it into the agent's config."""

    engine: str
    name: str
    region: str = ""
    project: str = ""
    subscription: str = ""
    resource_group: str = ""
    namespace: str = ""
    endpoint: str = ""  # tests: the call goes here instead of the provider's API

    def url(self) -> str:
        fact = _BY_ENGINE[self.engine]
        if self.endpoint:
            base = fact.url.split("/", 3)
            return self.endpoint.rstrip("/") + "/" + (base[3] if len(base) > 3 else "")
        return fact.url

    def formatted_url(self) -> str:
        return self.url().format(
            region=self.region,
            name=self.name,
            project=self.project,
            subscription=self.subscription,
            resource_group=self.resource_group,
            namespace=self.namespace,
        )


def parse_target(raw: object) -> ScaleTarget | None:
    """`{"engine": "aws_asg", "name": ..., "region": ...}` and so on; ValueError names the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"must be a JSON object, got {raw!r}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown key {', '.join(unknown)}")
    engine = raw.get("engine")
    if engine not in REQUIRED:
        raise ValueError(f"engine: must be one of {', '.join(REQUIRED)}, got {engine!r}")
    for key in FIELDS[1:]:
        value = raw.get(key, "")
        if not isinstance(value, str):
            raise ValueError(f"{key}: must be a string, got {value!r}")
    missing = [key for key in REQUIRED[str(engine)] if not raw.get(key)]
    if missing:
        raise ValueError(f"{engine} needs {', '.join(missing)}")
    return ScaleTarget(**{key: raw.get(key, "") for key in FIELDS})


def _k8s_patch(url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> Reply:
    """The API server's certificate is signed by the cluster's own CA (the pod's service account
    mount), not by a public one: verify against it."""
    if not url.startswith("https://"):
        return http(url, method="PATCH", headers=headers, data=body, timeout=timeout)
    context = ssl.create_default_context(cafile=_K8S_CA)
    req = urllib.request.Request(url, data=body, method="PATCH", headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return Reply(resp.status, resp.read(), {})
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read() if exc.fp is not None else b"", {})


def _token(url: str, headers: Mapping[str, str], timeout: float) -> str:
    reply = http(url, headers=headers, timeout=timeout)
    if reply.status != 200:
        raise OSError(f"token request answered {reply.status}")
    try:
        return str(json.loads(reply.body)["access_token"])
    except (ValueError, KeyError, TypeError):
        raise OSError("token reply has no access_token") from None


def scale_to_zero(
    target: ScaleTarget,
    *,
    metadata_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    now: datetime | None = None,
) -> str:
    """Ask the engine for zero nodes; returns what was asked; OSError when it refused or failed."""
    fact = _BY_ENGINE[target.engine]
    url = target.formatted_url()
    if target.engine == "aws_asg":
        params = {
            "Action": "UpdateAutoScalingGroup",
            "Version": fact.api_version,
            "AutoScalingGroupName": target.name,
            "MinSize": "0",
            "DesiredCapacity": "0",
        }
        creds = credentials(metadata_url, environ)
        when = now or datetime.now(timezone.utc)
        signed, headers = sign_query_get(
            url, params, creds, region=target.region, service="autoscaling", now=when
        )
        reply = http(signed, headers=headers, timeout=timeout)
    elif target.engine == "gcp_mig":
        assert GCP.metadata is not None
        base = (metadata_url or GCP.metadata.base_url).rstrip("/")
        token = _token(base + GCP.metadata.paths[fact.credential], GCP.metadata.headers, timeout)
        auth = {"Authorization": f"Bearer {token}"}
        reply = http(url, method="POST", headers=auth, data=b"", timeout=timeout)
    elif target.engine == "azure_vmss":
        assert AZURE.metadata is not None
        base = (metadata_url or AZURE.metadata.base_url).rstrip("/")
        token = _token(base + AZURE.metadata.paths[fact.credential], AZURE.metadata.headers, timeout)
        if not target.subscription:
            reply = http(
                base + AZURE.metadata.paths[fact.identity], headers=AZURE.metadata.headers, timeout=timeout
            )
            try:
                subscription = str(json.loads(reply.body)["subscriptionId"]) if reply.status == 200 else ""
            except (ValueError, KeyError, TypeError):
                subscription = ""
            if not subscription:
                raise OSError(f"the VM's subscription could not be read from IMDS ({reply.status})")
            url = replace(target, subscription=subscription).formatted_url()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        body = json.dumps({"sku": {"capacity": 0}}).encode()
        reply = http(url, method="PATCH", headers=headers, data=body, timeout=timeout)
    else:
        env = os.environ if environ is None else environ
        token_file = env.get("SPOTEVAL_K8S_TOKEN_FILE") or fact.credential
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"}
        body = json.dumps({"spec": {"replicas": 0}}).encode()
        reply = _k8s_patch(url, headers, body, timeout)
    if reply.status not in (200, 202):
        raise OSError(f"{target.engine} {target.name}: answered {reply.status}: {reply.body[:200]!r}")
    return f"{target.engine} {target.name} scaled to zero"
