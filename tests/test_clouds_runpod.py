"""Runpod control plane and the pod's own API stop, against a fake Runpod REST API v2 on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spoteval.agent import api_stop
from spoteval.clouds import CapacityError, ControlPlaneError, PlaneOptions, StackOutputs, open_plane
from spoteval.clouds.runpod import RunpodApi, RunpodError, RunpodPlane, capped_price
from tests.fake_runpod import API_KEY, FakeRunpod


@pytest.fixture
def fake() -> Iterator[FakeRunpod]:
    server = FakeRunpod(boot_polls=2)
    try:
        yield server
    finally:
        server.close()


def _outputs(**extra: Any) -> StackOutputs:
    raw = {
        "provider": "runpod",
        "region": "EU-RO-1",
        "zone": "",
        "node_ids": ["pod0001"],
        "instance_type": "NVIDIA L4",
        "market": "on_demand",
        "bucket_url": "s3://results/evals",
        "run_id": "r1",
        "server_port": 8000,
        "address_kind": "ephemeral",
        **extra,
    }
    return StackOutputs.parse(raw)


def _plane(fake: FakeRunpod, **extra: Any) -> RunpodPlane:
    api = RunpodApi(API_KEY, rest_url=fake.url, timeout_s=5)
    return RunpodPlane(_outputs(**extra), "pod0001", PlaneOptions(poll_s=0.01, configured_price=0.5), api)


def test_price_is_the_list_price_of_the_pods_cloud_times_its_gpus(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", gpu_count=2)
    price = _plane(fake).price_now()
    assert (price.per_hour, price.source, price.currency) == (0.86, "api", "USD")
    assert price.details["per_gpu"] == 0.43 and price.details["cloud"] == "SECURE"
    assert price.details["gpu_count"] == 2 and price.details["pod_cost_per_hr"] == 0.86
    assert fake.variables("getGpuType") == [{"id": "NVIDIA L4"}]
    fake.pods["pod0001"].cloud = "COMMUNITY"
    assert _plane(fake).price_now().per_hour == 0.62


def test_a_gpu_type_without_a_price_falls_back_to_the_configured_price(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", gpu_type="NVIDIA H200")
    price = _plane(fake, instance_type="NVIDIA H200").price_now()
    assert (price.per_hour, price.source) == (0.5, "configured")


def test_states_follow_the_pods_status_and_runtime(fake: FakeRunpod) -> None:
    pod = fake.add_pod("pod0001", boot_polls_left=1)
    plane = _plane(fake)
    assert (plane.state().status, plane.state().status) == ("pending", "running")
    for word, status in (("STARTING", "pending"), ("EXITED", "stopped"), ("ERROR", "stopped")):
        pod.status = word
        assert (plane.state().status, plane.state().raw) == (status, word)
    pod.status = "TERMINATED"  # the API answers 404
    with pytest.raises(ControlPlaneError, match="runpod pod pod0001: no such pod"):
        plane.state()


def test_stop_sends_the_stop_action_and_waits_until_exited(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001")
    plane = _plane(fake)
    plane.stop(5)
    assert fake.actions("stop") == ["pod0001"]
    assert plane.state().raw == "EXITED"
    plane.stop(5)  # already stopped: nothing more is sent
    assert fake.actions("stop") == ["pod0001"]


def test_start_reads_the_price_then_starts_and_waits_for_the_runtime(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", gpu_count=1, status="EXITED")
    plane = _plane(fake, max_price_per_gpu=0.5)
    plane.start(5)
    ops = fake.operations()
    assert ops.index("getGpuType") < ops.index("podAction") and fake.actions("start") == ["pod0001"]
    assert plane.state().running
    assert plane.address() == "203.0.113.7"
    assert plane.server_url() == "http://203.0.113.7:40123"


def test_start_is_refused_when_the_price_is_above_the_grants_cap(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", status="EXITED")
    with pytest.raises(
        ControlPlaneError, match=r"price 0\.43 per GPU-hour is above the most the grant allows"
    ):
        _plane(fake, max_price_per_gpu=0.4).start(5)
    assert fake.actions("start") == []
    assert _plane(fake).state().stopped


def test_a_start_refused_for_lack_of_gpus_is_a_capacity_error(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", status="EXITED")
    fake.start_refusal = "There are no instances available with the request specifications"
    with pytest.raises(CapacityError, match=r"HTTP 422: There are no instances available"):
        _plane(fake).start(5)


def test_a_pod_that_comes_back_with_fewer_gpus_fails_the_start(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", gpu_count=2, status="EXITED", comes_back_with_gpus=0)
    with pytest.raises(ControlPlaneError, match=r"came back with 0 GPU\(s\) instead of 2"):
        _plane(fake, gpu_count=2).start(5)


def test_private_address_kind_gives_the_pods_global_networking_ip(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001", boot_polls_left=1)
    plane = _plane(fake, address_kind="private")
    assert plane.address() is None  # still starting: no runtime
    plane.start(5)
    assert plane.address() == "10.65.1.42"


def test_simulated_preemption_stops_the_pod(fake: FakeRunpod) -> None:
    fake.add_pod("pod0001")
    assert _plane(fake).simulate_preemption(5) == "stop"
    assert fake.operations()[-2:] == ["podAction", "getPod"]


def test_api_errors_name_the_operation_and_the_pod(fake: FakeRunpod) -> None:
    with pytest.raises(ControlPlaneError, match="runpod pod pod0001: no such pod"):
        _plane(fake).state()
    bad = RunpodPlane(
        _outputs(), "pod0001", PlaneOptions(), RunpodApi("wrong", rest_url=fake.url, timeout_s=5)
    )
    with pytest.raises(ControlPlaneError, match=r"HTTP 401: the API key is refused \(RUNPOD_API_KEY\)"):
        bad.state()
    assert fake.unauthorized == 1
    fake.add_pod("pod0001", status="EXITED")
    api = RunpodApi(API_KEY, rest_url=fake.url, timeout_s=5)
    with pytest.raises(
        RunpodError, match=r"runpod stop pod0001: HTTP 409: action stop not valid for status EXITED"
    ):
        api.stop_pod("pod0001")


def test_open_plane_needs_the_api_key(monkeypatch: pytest.MonkeyPatch, fake: FakeRunpod) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    with pytest.raises(ControlPlaneError, match="RUNPOD_API_KEY is not set"):
        open_plane(_outputs(), "pod0001", PlaneOptions())
    for key, value in fake.env.items():
        monkeypatch.setenv(key, value)
    fake.add_pod("pod0001", boot_polls_left=1)
    plane = open_plane(_outputs(), "pod0001", PlaneOptions(poll_s=0.01))
    assert isinstance(plane, RunpodPlane) and plane.state().status == "pending"


def test_capped_price_never_exceeds_the_cap() -> None:
    assert capped_price(0.2, 0.3) == 0.2
    assert capped_price(0.3, 0.3) == 0.3
    assert capped_price(0.2, None) == 0.2
    with pytest.raises(RunpodError, match="above the most the grant allows"):
        capped_price(0.31, 0.3)


def test_network_volumes_are_created_read_resized_and_deleted_over_rest_v2(fake: FakeRunpod) -> None:
    api = RunpodApi(API_KEY, rest_url=fake.url, timeout_s=5)
    volume = api.create_network_volume("weights", 100, "EU-RO-1")
    assert fake.calls[-1] == (
        "createNetworkVolume",
        {"name": "weights", "size": 100, "dataCenter": "EU-RO-1"},
    )
    assert api.network_volume(str(volume["id"])) == volume
    assert api.resize_network_volume(str(volume["id"]), 150)["size"] == 150
    with pytest.raises(RunpodError, match="HTTP 400: network volume storage cannot be reduced"):
        api.resize_network_volume(str(volume["id"]), 120)
    api.delete_network_volume(str(volume["id"]))
    assert api.network_volume(str(volume["id"])) is None


# --- the pod stops itself through the API (the agent's on_done: api_stop) ------------------------


def test_api_stop_on_a_pod_sends_pod_stop_for_its_own_pod_id(
    fake: FakeRunpod, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_pod("pod0001")
    for key, value in {**fake.env, "RUNPOD_POD_ID": "pod0001"}.items():
        monkeypatch.setenv(key, value)
    assert api_stop.main(["runpod"]) == 0
    assert fake.variables("podAction") == [{"id": "pod0001", "action": "stop"}]
    assert "runpod pod pod0001: stop requested" in capsys.readouterr().err


def test_api_stop_without_the_pod_id_fails_in_one_line(
    fake: FakeRunpod, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in fake.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RUNPOD_POD_ID", raising=False)
    assert api_stop.main(["runpod"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spot-eval-api-stop: runpod: RUNPOD_POD_ID is not set (Runpod sets it inside a pod)"]
    assert fake.operations() == []
