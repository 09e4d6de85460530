"""The control-plane interface (outputs, prices, waiting) and the AWS plane against moto server."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import boto3
import pytest
from mypy_boto3_ec2.type_defs import SpotPriceTypeDef

from spoteval.clouds import (
    PROVIDERS,
    ControlPlaneError,
    NodeState,
    PlaneOptions,
    Price,
    StackOutputs,
    open_plane,
    wait_for,
)
from spoteval.clouds.aws import AwsPlane, spot_price
from tests import servers

ZONE: Final = "us-east-1b"


def raw_outputs(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "provider": "aws",
        "region": "us-east-1",
        "zone": ZONE,
        "node_ids": ["i-0abc"],
        "instance_type": "g6.xlarge",
        "market": "spot",
        "bucket_url": "s3://results/evals",
        "run_id": "r1",
        "server_port": 8000,
        "address_kind": "public",
    }
    raw.update(over)
    return raw


# --- the interface -----------------------------------------------------------------------------


def test_outputs_parse_the_shape_pulumi_prints() -> None:
    out = StackOutputs.parse(json.loads(json.dumps(raw_outputs(server_port="8000", extra_output=1))))
    assert out.node_ids == ("i-0abc",)
    assert out.server_port == 8000
    assert out.extra == {"extra_output": 1}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"instance_type": None}, r"outputs\.instance_type: missing"),
        ({"market": "preemptible"}, r"outputs\.market: 'preemptible' is not one of on_demand, spot"),
        ({"node_ids": []}, r"outputs\.node_ids: must be a non-empty list"),
        ({"server_port": 70000}, r"outputs\.server_port: must be a TCP port"),
        ({"provider": "openstack"}, r"outputs\.provider: unknown provider 'openstack'"),
    ],
)
def test_bad_outputs_name_the_key(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ControlPlaneError, match=message):
        StackOutputs.parse(raw_outputs(**over))


def test_every_provider_in_the_registry_has_a_factory() -> None:
    assert set(PROVIDERS) >= {"aws", "gcp", "azure", "kubernetes"}
    assert all(callable(f) for f in PROVIDERS.values())


def test_every_provider_with_facts_has_a_control_plane_under_its_name_and_its_key() -> None:
    from spoteval import providers

    assert set(PROVIDERS) == {*providers.PROVIDERS, *providers.BY_KEY}


def test_each_plane_parses_its_own_options_and_names_a_key_it_does_not_take() -> None:
    from spoteval.clouds.aws import AwsOptions
    from spoteval.clouds.kubernetes import KubernetesOptions

    options = PlaneOptions(providers={"aws": {"fis_template_id": "EXT1"}, "gcp": {"project": "p"}})
    assert AwsOptions.parse(options) == AwsOptions(fis_template_id="EXT1")
    assert (
        KubernetesOptions.parse(PlaneOptions(providers={"k8s": {"namespace": "evals"}})).namespace == "evals"
    )
    with pytest.raises(
        ControlPlaneError, match=r"aws options: unknown key 'project' \(known: fis_template_id\)"
    ):
        AwsOptions.parse(PlaneOptions(providers={"aws": {"project": "p"}}))
    with pytest.raises(ControlPlaneError, match=r"aws option fis_template_id: must be a string, got 3"):
        AwsOptions.parse(PlaneOptions(providers={"aws": {"fis_template_id": 3}}))


def test_plane_config_puts_each_flat_option_in_the_block_of_its_provider() -> None:
    from spoteval.clouds import PlaneConfig

    options = PlaneConfig(
        configured_price=0.5,
        poll_s=2.0,
        fis_template_id="EXT1",
        gcp_project=None,
        azure_resource_group="rg",
        k8s_namespace="evals",
    )
    assert (options.configured_price, options.currency, options.poll_s) == (0.5, "USD", 2.0)
    assert options.providers == {
        "aws": {"fis_template_id": "EXT1"},
        "azure": {"resource_group": "rg"},
        "kubernetes": {"namespace": "evals"},
    }
    with pytest.raises(TypeError, match="unknown option 'gcp_zone'"):
        PlaneConfig(gcp_zone="a")


def test_open_plane_refuses_a_node_outside_the_stack() -> None:
    with pytest.raises(ControlPlaneError, match="i-other"):
        open_plane(StackOutputs.parse(raw_outputs()), "i-other", PlaneOptions())


def test_price_source_and_value_must_agree() -> None:
    with pytest.raises(ValueError, match="must be None"):
        Price(1.0, "USD", "unknown")
    with pytest.raises(ValueError, match="must not be None"):
        Price(None, "USD", "api")
    with pytest.raises(ValueError, match="unknown price source"):
        Price(1.0, "USD", "guess")


def test_wait_for_returns_the_wanted_state_and_times_out_naming_it() -> None:
    states = iter(["pending", "pending", "running"])
    got = wait_for(lambda: NodeState(next(states), "x"), {"running"}, timeout_s=5, poll_s=0.001, what="w")
    assert got.running
    with pytest.raises(
        ControlPlaneError, match=r"node-1: still pending after 0\.05 s \(waiting for running\)"
    ):
        wait_for(
            lambda: NodeState("pending", "pending"), {"running"}, timeout_s=0.05, poll_s=0.01, what="node-1"
        )
    with pytest.raises(ControlPlaneError, match="the node is terminated"):
        wait_for(
            lambda: NodeState("terminated", "terminated"), {"running"}, timeout_s=5, poll_s=0.01, what="n"
        )


# --- spot price history --------------------------------------------------------------------------


def test_the_newest_entry_for_the_type_and_zone_is_the_price() -> None:
    now = datetime(2026, 11, 30, 5, tzinfo=timezone.utc)

    def entry(price: str, zone: str, minutes_ago: int, itype: str = "g6.xlarge") -> SpotPriceTypeDef:
        return {
            "AvailabilityZone": zone,
            "InstanceType": itype,  # type: ignore[typeddict-item]
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": price,
            "Timestamp": now - timedelta(minutes=minutes_ago),
        }

    history = [
        entry("0.41", ZONE, 30),
        entry("0.39", ZONE, 5),
        entry("0.10", "us-east-1a", 1),
        entry("0.05", ZONE, 0, itype="g6.2xlarge"),
    ]
    price = spot_price(history, "g6.xlarge", ZONE)
    assert price is not None
    assert (price.per_hour, price.source, price.currency) == (0.39, "api", "USD")
    assert price.details["zone"] == ZONE
    assert spot_price(history, "p5.48xlarge", ZONE) is None


# --- against moto ----------------------------------------------------------------------------------


@pytest.fixture
def moto_ec2(moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch) -> servers.Server:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    return moto_server


def launch(market: str = "spot") -> str:
    ec2 = boto3.client("ec2")
    kwargs: dict[str, Any] = {}
    if market == "spot":
        kwargs["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "persistent", "InstanceInterruptionBehavior": "stop"},
        }
    reply = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="g6.xlarge",
        Placement={"AvailabilityZone": ZONE},
        **kwargs,
    )
    return reply["Instances"][0]["InstanceId"]


def aws_plane(node: str, **over: Any) -> AwsPlane:
    outputs = StackOutputs.parse(raw_outputs(node_ids=[node], **over))
    plane = open_plane(outputs, node, PlaneOptions(poll_s=0.02, configured_price=0.7))
    assert isinstance(plane, AwsPlane)
    return plane


def test_price_is_read_from_moto_spot_price_history(moto_ec2: servers.Server) -> None:
    price = aws_plane(launch()).price_now()
    assert price.source == "api"
    assert price.per_hour == pytest.approx(0.00001)  # moto's price for every type
    assert price.details["zone"] == ZONE


def test_on_demand_price_is_the_configured_one(moto_ec2: servers.Server) -> None:
    price = aws_plane(launch("on_demand"), market="on_demand").price_now()
    assert (price.per_hour, price.source) == (0.7, "configured")


def test_stop_and_start_reach_the_state_and_the_public_ip_changes(moto_ec2: servers.Server) -> None:
    plane = aws_plane(launch())
    deadline = time.monotonic() + 5
    while not plane.state().running and time.monotonic() < deadline:
        time.sleep(0.02)
    before = plane.address()
    private = aws_plane(plane.node, address_kind="private").address()
    plane.stop(timeout_s=5)
    assert plane.state().stopped
    assert plane.state().details["state_reason"] == "Client.UserInitiatedShutdown"
    plane.start(timeout_s=5)
    assert plane.state().running
    assert plane.address() not in (None, before)
    assert aws_plane(plane.node, address_kind="private").address() == private  # the private IP is kept


def test_terminated_instance_cannot_be_started(moto_ec2: servers.Server) -> None:
    node = launch()
    boto3.client("ec2").terminate_instances(InstanceIds=[node])
    plane = aws_plane(node)
    with pytest.raises(ControlPlaneError, match="terminated"):
        plane.start(timeout_s=1)


def test_unknown_instance_is_named_in_the_error(moto_ec2: servers.Server) -> None:
    with pytest.raises(ControlPlaneError, match=r"i-0123456789abcdef0.*InvalidInstanceID"):
        aws_plane("i-0123456789abcdef0").state()


def test_a_pools_group_name_is_not_a_node_to_restart() -> None:
    with pytest.raises(ControlPlaneError, match="not an instance id"):
        aws_plane("r1-pool")


def test_preemption_without_a_fis_template_says_what_is_needed(moto_ec2: servers.Server) -> None:
    with pytest.raises(ControlPlaneError, match="aws:ec2:send-spot-instance-interruptions"):
        aws_plane(launch()).simulate_preemption(timeout_s=1)
