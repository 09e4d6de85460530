"""The AWS idle stop: an alarm on the agent's has-work metric, never on CPU.

- the stack declares the alarm exactly (metric, statistic, periods, missing data as breaching, the
  EC2 stop action) and nothing on CPUUtilization;
- the agent publishes the metric with the standard library (a form POST signed like botocore signs
  it) to a real CloudWatch API (moto server on loopback);
- episodes that sleep (CPU idle) for longer than the idle window keep the metric at 1, so the
  declared alarm does not fire; once the agent is gone the metric stops and the alarm fires (moto
  stores datapoints but does not evaluate alarms: `IdleAlarm.fires` is CloudWatch's evaluation of
  the declared alarm, applied to the datapoints moto stored, with the period scaled to seconds);
- the operator's start of a node resets the alarm to OK, so the next idle period stops it again.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from components.aws_rules import IdleAlarm, idle_alarm, idle_alarm_name
from components.mocks import render_stack, stack_files, stack_name
from spoteval.agent import aws_metric
from spoteval.agent.aws_price import Credentials
from spoteval.clouds.aws import AwsPlane
from spoteval.clouds.base import PlaneOptions, StackOutputs
from spoteval.manifest import ManifestEntry, dump_manifest
from spoteval.record import RunLayout
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import (
    FakeAws,
    agent_config,
    cleanup_tagged,
    episode_command,
    start_agent,
    wait_for,
    write_config,
)
from tests.test_stacks import NOW

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REGION = "us-east-1"
NODE = "i-0123456789abcdef0"


# --- what the stack declares ------------------------------------------------------------------------


def test_the_aws_stack_declares_the_has_work_alarm_exactly() -> None:
    path = next(p for p in stack_files() if stack_name(p) == "aws-us-east-1")
    r = render_stack(path, now=NOW)
    instance_id = r.outputs["node_ids"][0]
    alarm = r.one("aws:cloudwatch/metricAlarm:MetricAlarm").inputs
    declared = {k: v for k, v in alarm.items() if k != "alarmDescription"}
    assert declared == {
        "name": "spot-eval-qwen7b-drill-aws-idle",
        "namespace": "SpotEval/Agent",
        "metricName": "HasWork",
        "dimensions": {"InstanceId": instance_id},
        "statistic": "Maximum",
        "period": 300,
        "evaluationPeriods": 4,  # idle_minutes 20
        "datapointsToAlarm": 4,
        "threshold": 1,
        "comparisonOperator": "LessThanThreshold",
        "treatMissingData": "breaching",
        "alarmActions": ["arn:aws:automate:us-east-1:ec2:stop"],
    }
    everything = json.dumps([d.inputs for d in r.resources])
    assert "CPUUtilization" not in everything


def test_alarm_model_missing_data_breaches_and_one_busy_datapoint_per_period_holds_it() -> None:
    alarm = idle_alarm(20 * 60)
    assert (alarm.period_s, alarm.evaluation_periods) == (300, 4)
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
    busy = [(t0 + timedelta(minutes=m), 1.0) for m in range(0, 60)]
    assert not alarm.fires(busy, t0 + timedelta(minutes=59))
    idle = busy[:30] + [(t0 + timedelta(minutes=m), 0.0) for m in range(30, 60)]
    assert not alarm.fires(idle, t0 + timedelta(minutes=45))  # 15 idle minutes: 3 periods of 4
    assert alarm.fires(idle, t0 + timedelta(minutes=50))  # 20 idle minutes
    assert alarm.fires(busy[:30], t0 + timedelta(minutes=50))  # the agent gone for 20 minutes
    assert not alarm.fires(busy[:30], t0 + timedelta(minutes=45))


# --- the agent's metric against CloudWatch (moto) -----------------------------------------------------


def test_the_signature_is_botocore_s_for_the_same_form_post() -> None:
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "tok/en+=")
    params = {"Action": "PutMetricData", "Version": "2010-08-01", "Namespace": "SpotEval/Agent"}
    url = "https://monitoring.us-east-1.amazonaws.com/"
    body = aws_metric.sign_form_post(
        url, params, creds, region=REGION, service="monitoring", now=datetime.now(timezone.utc)
    )[0]
    request = AWSRequest(
        method="POST", url=url, data=body, headers={"Content-Type": aws_metric.FORM_CONTENT_TYPE}
    )
    SigV4Auth(
        BotoCredentials(creds.access_key_id, creds.secret_access_key, creds.session_token),
        "monitoring",
        REGION,
    ).add_auth(request)
    when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    signed_body, headers = aws_metric.sign_form_post(
        url, params, creds, region=REGION, service="monitoring", now=when
    )
    assert signed_body == body
    assert headers["Authorization"] == request.headers["Authorization"]
    assert headers["x-amz-security-token"] == "tok/en+="


def _cloudwatch(server: servers.Server) -> Any:
    return boto3.client(
        "cloudwatch",
        region_name=REGION,
        endpoint_url=server.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _datapoints(server: servers.Server) -> list[tuple[datetime, float]]:
    now = datetime.now(timezone.utc)
    reply = _cloudwatch(server).get_metric_statistics(
        Namespace="SpotEval/Agent",
        MetricName="HasWork",
        Dimensions=[{"Name": "InstanceId", "Value": NODE}],
        StartTime=now - timedelta(minutes=10),
        EndTime=now + timedelta(minutes=1),
        Period=1,
        Statistics=["Maximum"],
    )
    return sorted((d["Timestamp"].astimezone(timezone.utc), d["Maximum"]) for d in reply["Datapoints"])


@pytest.fixture
def cloudwatch_env(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> servers.Server:
    servers.moto_reset(moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH", moto_server.url)
    return moto_server


def _start_sleeping_agent(tmp_path: Path, imds: FakeAws, sleep_s: float) -> Any:
    store_url = f"file://{tmp_path}/store"
    raw = agent_config(
        store_url,
        {},
        "idle-run",
        tmp_path,
        node=NODE,
        provider="aws",
        concurrency=2,
        heartbeat_s=0.25,
        timeout_s=60.0,
        command=episode_command(seconds=sleep_s),
        metadata_url=imds.url,
        price={"per_hour": 0.5},
        stop_rules={"idle_s": 600},
    )
    raw["node"].update(region=REGION, zone="us-east-1a", instance_type="g6.xlarge")
    entries = [ManifestEntry("e1", {"n": 0}), ManifestEntry("e2", {"n": 1})]
    Store(store_url).put_new(RunLayout("idle-run").manifest, dump_manifest(entries))
    return start_agent(write_config(tmp_path / "agent.json", raw), tmp_path)


def test_sleeping_episodes_keep_the_node_and_a_gone_agent_stops_it(
    tmp_path: Path, cloudwatch_env: servers.Server
) -> None:
    # the declared alarm with its period scaled from 300 s to 1 s: idle for 3 s stops the node
    alarm = IdleAlarm(period_s=1, evaluation_periods=3)
    imds = FakeAws()
    agent = _start_sleeping_agent(tmp_path, imds, sleep_s=30.0)  # CPU idle far beyond 3 s
    try:
        assert wait_for(lambda: len(_datapoints(cloudwatch_env)) >= 1, 60), agent.stderr()
        first = _datapoints(cloudwatch_env)[0][0]
        # episodes sleep: run on until the idle window has passed several times over
        assert wait_for(lambda: _datapoints(cloudwatch_env)[-1][0] >= first + timedelta(seconds=8), 60)
        assert agent.proc.poll() is None, agent.stderr()
        points = _datapoints(cloudwatch_env)
        assert {v for _, v in points} == {1.0}  # work, all along, though the CPU is idle
        for second in range(3, 9):
            assert not alarm.fires(points, first + timedelta(seconds=second)), (second, points)
        cleanup_tagged(agent)  # the node's agent is gone (killed with its episodes)
        gone_at = datetime.now(timezone.utc)
        time.sleep(4.5)
        points = _datapoints(cloudwatch_env)
        assert points[-1][0] <= gone_at + timedelta(seconds=1)  # nothing published after
        assert alarm.fires(points, gone_at + timedelta(seconds=4))
    finally:
        cleanup_tagged(agent)
        imds.close()


# --- the operator starts it again ------------------------------------------------------------------


def test_operator_start_resets_the_idle_alarm_so_it_can_stop_the_node_again(
    cloudwatch_env: servers.Server,
) -> None:
    session = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    ec2 = session.client("ec2", endpoint_url=cloudwatch_env.url)
    cloudwatch = session.client("cloudwatch", endpoint_url=cloudwatch_env.url)
    image = ec2.describe_images()["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g6.xlarge")
    node = instance["Instances"][0]["InstanceId"]
    ec2.stop_instances(InstanceIds=[node])  # what the alarm's EC2 action does
    name = idle_alarm_name("idle-run")
    cloudwatch.put_metric_alarm(
        AlarmName=name,
        Namespace="SpotEval/Agent",
        MetricName="HasWork",
        Dimensions=[{"Name": "InstanceId", "Value": node}],
        Statistic="Maximum",
        Period=300,
        EvaluationPeriods=4,
        Threshold=1.0,
        ComparisonOperator="LessThanThreshold",
        TreatMissingData="breaching",
    )
    cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="no work")
    outputs = StackOutputs(
        provider="aws",
        region=REGION,
        zone="us-east-1a",
        node_ids=(node,),
        instance_type="g6.xlarge",
        market="spot",
        bucket_url="s3://b",
        run_id="idle-run",
        server_port=8000,
        address_kind="ephemeral",
    )
    plane = AwsPlane(outputs, node, PlaneOptions(poll_s=0.05), ec2, cloudwatch=cloudwatch)
    plane.start(timeout_s=30)
    assert plane.state().status == "running"
    state = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
    assert state["StateValue"] == "OK"
    assert state["StateReason"] == "started by the operator: the next idle period stops it again"
