"""The agent's "has work" signal on AWS: a CloudWatch metric the stack's idle alarm watches.

At every heartbeat (at most `AWS_AGENT_METRIC.interval_s` apart) the agent publishes `HasWork`
(namespace and names in spoteval/provider_rules.py) for its instance: 1 while episodes run or wait to
run (or the agent is still starting: loading the model counts as work), 0 when nothing runs and
nothing is left to dispatch. The alarm (components/aws_rules.py) stops the instance when the
metric's maximum stays below 1 for `idle_minutes`, and treats missing data as breaching: an agent
that is gone (crashed, never started, hung without publishing) stops the node too. CPU plays no
part: episodes that wait on the model server keep the CPU near zero and still publish 1.

`PutMetricData` is a CloudWatch Query API call (a form POST, as the AWS SDKs send it), signed here
with the standard library (Signature Version 4, `spoteval.apis.sigv4`; the instance role's credentials
from IMDSv2, or the standard AWS_* variables: `spoteval.apis.imds`). `AWS_ENDPOINT_URL_CLOUDWATCH` (else
`AWS_ENDPOINT_URL`), the AWS SDKs' endpoint override, points it elsewhere (tests: a moto server).
A failed publish is logged and retried at the next interval: the metric is a guard, never a
reason for the run to stop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from spoteval.agent.config import AgentConfig
from spoteval.apis.http import request
from spoteval.apis.imds import credentials
from spoteval.apis.sigv4 import FORM_CONTENT_TYPE, sign_form_post
from spoteval.provider_rules import AWS_AGENT_METRIC
from spoteval.providers import REGISTRY, AgentMetric

__all__ = ["FORM_CONTENT_TYPE", "endpoint", "publishes", "put_has_work", "sign_form_post", "start_publisher"]


def endpoint(region: str, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    override = env.get("AWS_ENDPOINT_URL_CLOUDWATCH") or env.get("AWS_ENDPOINT_URL")
    return override.rstrip("/") + "/" if override else AWS_AGENT_METRIC.url.format(region=region)


def put_has_work(
    region: str,
    instance_id: str,
    has_work: bool,
    *,
    metadata_url: str | None = None,
    now: datetime | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Publish one `HasWork` datapoint for `instance_id`; OSError when CloudWatch refuses it."""
    creds = credentials(metadata_url, environ)
    when = now or datetime.now(timezone.utc)
    m = AWS_AGENT_METRIC
    params = {
        "Action": "PutMetricData",
        "Version": m.version,
        "Namespace": m.namespace,
        "MetricData.member.1.MetricName": m.metric,
        "MetricData.member.1.Dimensions.member.1.Name": m.dimension,
        "MetricData.member.1.Dimensions.member.1.Value": instance_id,
        "MetricData.member.1.Value": "1" if has_work else "0",
        "MetricData.member.1.Unit": "Count",
        "MetricData.member.1.Timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    url = endpoint(region, environ)
    body, headers = sign_form_post(url, params, creds, region=region, service=m.service, now=when)
    reply = request(url, method="POST", headers=headers, data=body, timeout=5.0)
    if reply.status != 200:
        raise OSError(f"PutMetricData answered {reply.status}: {reply.body[:200]!r}")


def publishes(config: AgentConfig) -> bool:
    """Whether this node publishes the signal: nodes of a provider whose idle rule watches the
    agent's metric (`AGENT_METRIC`: AWS), with an idle rule (the alarm's input)."""
    node = config.node
    found = REGISTRY.get(node.provider)
    watched = found is not None and isinstance(found.AGENT_METRIC, AgentMetric)
    return watched and bool(node.region) and config.stop_rules.idle_s is not None


def start_publisher(
    config: AgentConfig,
    has_work: Callable[[], bool],
    stopping: threading.Event,
    log: Callable[[str], None],
    *,
    interval_s: float | None = None,
) -> threading.Thread | None:
    """Publish `has_work()` now and every interval until `stopping` is set; None when not publishing."""
    if not publishes(config):
        return None
    region = config.node.region or ""
    # every heartbeat, at most a minute apart (CloudWatch keeps one datapoint a minute)
    every = min(AWS_AGENT_METRIC.interval_s, config.heartbeat_s) if interval_s is None else interval_s

    def publish() -> None:
        failing = False
        while True:
            try:
                put_has_work(region, config.node.id, has_work(), metadata_url=config.metadata_url)
                if failing:
                    log("the has-work metric is published again")
                failing = False
            except (OSError, ValueError) as exc:
                if not failing:
                    log(f"cannot publish the has-work metric (the idle alarm may stop the node): {exc}")
                failing = True
            if stopping.wait(every):
                return

    thread = threading.Thread(target=publish, name="has-work-metric", daemon=True)
    thread.start()
    return thread
