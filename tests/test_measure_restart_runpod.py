"""measure_restart on a Runpod pod: the model server is reached where Runpod publishes its port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.measure_restart import main
from spoteval import standin
from spoteval.record import Event, RunLayout
from spoteval.store import Store
from tests.fake_runpod import FakeRunpod


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunpod]:
    server = FakeRunpod(boot_polls=1)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield server
    finally:
        server.close()


def test_restart_cycle_finds_the_model_server_at_the_published_port(
    tmp_path: Path,
    fake: FakeRunpod,
    standin_server: standin.StandinServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    published = standin_server.server_address[1]
    fake.add_pod("pod0001", ip="127.0.0.1", ports=[(8000, published)])
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "provider": "runpod",
                "region": "EU-RO-1",
                "zone": "",
                "node_ids": ["pod0001"],
                "instance_type": "NVIDIA L4",
                "market": "on_demand",
                "bucket_url": f"file://{tmp_path}/store",
                "run_id": "r1",
                "server_port": 8000,
                "address_kind": "ephemeral",
            }
        )
    )
    code = main(
        [
            "--outputs",
            str(outputs),
            "--yes",
            "--cycles",
            "1",
            "--json",
            "--poll",
            "0.01",
            "--serve-timeout",
            "20",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["outcome"] == "completed"
    assert report["cycles"][0]["model"]  # /v1/models answered through the published port
    actions = [v["action"] for v in fake.variables("podAction")]
    assert actions == ["stop", "start", "stop"]  # the cycle, then the pod left stopped
    store = Store(f"file://{tmp_path}/store")
    kinds = []
    for key in store.list(RunLayout("r1").events_prefix):
        data = store.get(key)
        assert data is not None
        event, problems = Event.loads(data)
        assert problems == []
        kinds.append((event.kind, event.reason))
    assert ("stop", "measurement") in kinds and ("start", "measurement") in kinds
