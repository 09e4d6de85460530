"""Nebius control plane and the VM's own API stop, against a fake Nebius gRPC API on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spoteval.agent import api_stop
from spoteval.clouds import ControlPlaneError, PlaneOptions, StackOutputs
from spoteval.clouds.nebius import NebiusPlane, gpus_of
from tests.fake_nebius import TOKEN, FakeNebius, State

NODE = "computeinstance-e00spot"


@pytest.fixture
def fake() -> Iterator[FakeNebius]:
    server = FakeNebius()
    try:
        yield server
    finally:
        server.close()


def _outputs(**extra: Any) -> StackOutputs:
    raw = {
        "provider": "nebius",
        "region": "eu-north1",
        "zone": "",
        "node_ids": [NODE],
        "instance_type": "gpu-l40s-a/1gpu-8vcpu-32gb",
        "market": "spot",
        "bucket_url": "s3://spot-eval-results/evals",
        "run_id": "r1",
        "server_port": 8000,
        "address_kind": "ephemeral",
        **extra,
    }
    return StackOutputs.parse(raw)


def _plane(fake: FakeNebius, **extra: Any) -> NebiusPlane:
    return NebiusPlane(_outputs(**extra), NODE, PlaneOptions(poll_s=0.01, configured_price=1.1), fake.sdk())


def test_state_reads_the_instance_through_the_api_with_the_token(fake: FakeNebius) -> None:
    fake.add(NODE, State.STOPPED)
    state = _plane(fake).state()
    assert (state.status, state.raw) == ("stopped", "STOPPED")
    assert fake.calls == [("Get", NODE, f"Bearer {TOKEN}")]


def test_stop_calls_the_api_and_waits_until_stopped(fake: FakeNebius) -> None:
    fake.add(NODE, State.RUNNING)
    plane = _plane(fake)
    plane.stop(10)
    assert fake.methods().count("Stop") == 1
    assert plane.state().stopped
    plane.stop(10)  # already stopped: nothing is sent
    assert fake.methods().count("Stop") == 1


def test_start_calls_the_api_waits_for_running_and_reads_the_public_address(fake: FakeNebius) -> None:
    fake.add(NODE, State.STOPPED)
    plane = _plane(fake)
    plane.start(10)
    assert fake.methods().count("Start") == 1
    assert plane.state().running
    assert plane.address() == "198.51.100.9"
    assert _plane(fake, address_kind="private").address() == "10.1.0.4"


def test_a_failed_stop_operation_names_the_instance(fake: FakeNebius) -> None:
    fake.add(NODE, State.RUNNING)
    fake.fail_stop = "instance is being updated"
    with pytest.raises(ControlPlaneError, match=f"nebius stop {NODE}: the operation failed"):
        _plane(fake).stop(5)


def test_an_unknown_instance_is_a_control_plane_error(fake: FakeNebius) -> None:
    with pytest.raises(ControlPlaneError, match=f"nebius get {NODE}: .*not found"):
        _plane(fake).state()


def test_spot_price_is_the_platforms_price_in_the_region_times_the_presets_gpus(fake: FakeNebius) -> None:
    fake.add_spot_price("eu-north1", "gpu-l40s-a", "0.62")
    fake.add_spot_price("eu-north1", "gpu-h100-sxm", "1.25")
    fake.add_spot_price("us-central1", "gpu-l40s-a", "0.70")
    price = _plane(fake, instance_type="gpu-l40s-a/2gpu-16vcpu-64gb").price_now()
    assert (price.per_hour, price.source, price.details["sku"]) == (1.24, "api", "sku-gpu-l40s-a-eu-north1")


def test_without_a_matching_spot_price_the_configured_price_is_used(fake: FakeNebius) -> None:
    fake.add_spot_price("us-central1", "gpu-l40s-a", "0.70")
    price = _plane(fake).price_now()
    assert (price.per_hour, price.source) == (1.1, "configured")
    on_demand = _plane(fake, market="on_demand").price_now()
    assert on_demand.source == "configured" and "ListSpotPrices" in fake.methods()


def test_gpus_of_reads_the_preset() -> None:
    assert gpus_of("gpu-h100-sxm/8gpu-128vcpu-1600gb") == 8
    assert gpus_of("cpu-d3/4vcpu-16gb") == 1


# --- the VM stops itself by a guest shutdown (recovery_policy FAIL), not through the API ----------


def test_api_stop_serves_no_nebius_node(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        api_stop.main(["nebius"])
    assert info.value.code == 2
    assert "invalid choice: 'nebius'" in capsys.readouterr().err
    assert api_stop.PROVIDERS == ("runpod",)
