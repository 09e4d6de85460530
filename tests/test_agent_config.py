"""The agent's config parse and the bad-input paths of its command line: one line, exit 2, nothing written."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from spoteval.agent import exits
from spoteval.agent.__main__ import main
from spoteval.agent.config import ConfigError, build_agent_config, parse, substitute
from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import agent_config, write_config, write_manifest
from tests.servers import free_port


def _base(tmp_path: Path) -> dict[str, Any]:
    return agent_config(f"file://{tmp_path}/store", {}, "r1", tmp_path)


def test_a_full_config_parses_into_typed_values(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    raw["price"] = {"per_hour": 1.25}
    raw["stop_rules"] = {"max_runtime_s": 3600, "budget": 20, "on_done": "poweroff", "idle_s": 60}
    config = parse(raw)
    assert config.node.provider == "local" and config.node.market == "spot"
    assert config.episodes.concurrency == 4 and config.episodes.max_attempts == 2
    assert config.price is not None and config.price.currency == "USD"
    assert config.stop_rules.poweroff_command == ("systemctl", "poweroff")
    assert config.server.health_url.endswith("/health")
    assert config.store_options_with_defaults()["max_retries"] == 2


def test_defaults_apply_for_optional_keys(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    for key in ("heartbeat_s", "spool_dir", "work_dir", "boot_file"):
        del raw[key]
    del raw["episodes"]["concurrency"]
    config = parse(raw)
    assert config.heartbeat_s == 30.0
    assert config.spool_dir == "/var/lib/spot-eval/spool"
    assert config.boot_file == "/var/lib/spot-eval/boot.json"
    assert config.episodes.concurrency == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("run_id"), "missing key run_id"),
        (lambda c: c["node"].pop("provider"), "missing key node.provider"),
        (lambda c: c["node"].update(provider="gce"), "node.provider: unknown provider 'gce'"),
        (lambda c: c.update(store="bucket/prefix"), "store: store URL 'bucket/prefix' must look like"),
        (lambda c: c.update(store="ftp://x/y"), "unknown scheme 'ftp'"),
        (lambda c: c["server"].update(url="localhost:8000"), "is not an http(s) URL"),
        (lambda c: c.update(metadata_url="169.254.169.254"), "metadata_url"),
        (lambda c: c["episodes"].update(concurrency=0), "episodes.concurrency: must be an integer >= 1"),
        (lambda c: c["episodes"].update(command=["run-episode"]), "{output} placeholder"),
        (lambda c: c["episodes"].update(command="run.sh {output}"), "must be a non-empty list"),
        (lambda c: c.update(heartbeat_s=0), "heartbeat_s: must be > 0"),
        (lambda c: c.update(hearbeat_s=5), "unknown key hearbeat_s"),
        (lambda c: c["node"].update(market="preemptible"), "node.market"),
        (lambda c: c.update(price={"currency": "EUR"}), "missing key price.per_hour"),
        (lambda c: c.update(stop_rules={"on_done": "halt"}), "stop_rules.on_done: 'halt'"),
        (lambda c: c.update(spool_dir="spool"), "spool_dir: 'spool' must be an absolute path"),
        (lambda c: c.update(run_id="a/b"), "run_id 'a/b'"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, change: Any, message: str) -> None:
    raw = copy.deepcopy(_base(tmp_path))
    change(raw)
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert message in str(info.value)


def test_poweroff_from_inside_stops_a_nebius_vm(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    raw["node"]["provider"] = "nebius"
    raw["stop_rules"] = {"on_done": "poweroff"}
    assert parse(raw).stop_rules.poweroff_command == ("systemctl", "poweroff")
    raw["stop_rules"] = {"on_done": "api_stop"}
    with pytest.raises(ConfigError, match=r"stop_rules\.on_done: api_stop stops runpod nodes"):
        parse(raw)


@pytest.mark.parametrize("provider", ["k8s", "runpod"])
def test_poweroff_from_inside_is_refused_where_it_does_not_stop_the_bill(
    tmp_path: Path, provider: str
) -> None:
    raw = _base(tmp_path)
    raw["node"]["provider"] = provider
    raw["stop_rules"] = {"on_done": "poweroff"}
    with pytest.raises(ConfigError, match=r"stop_rules\.on_done"):
        parse(raw)
    raw["stop_rules"]["poweroff_command"] = ["/usr/local/bin/stop-me"]
    assert parse(raw).stop_rules.poweroff_command == ("/usr/local/bin/stop-me",)


def test_placeholders_are_replaced_as_plain_text() -> None:
    argv = ["run", "--id={episode_id}", '{"url": "{model_url}"}', "{output}"]
    out = substitute(argv, {"episode_id": "e1", "model_url": "http://m", "output": "/o.json"})
    assert out == ["run", "--id=e1", '{"url": "http://m"}', "/o.json"]


# --- the command line ---------------------------------------------------------------------------


def _run_main(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "spool").exists()
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("store"), "missing key store"),
        (lambda c: c["node"].update(provider="oracle"), "unknown provider 'oracle'"),
        (lambda c: c.update(store="s3:///nobucket"), "names no bucket"),
        (lambda c: c["episodes"].update(command=["/no/such/episode", "{output}"]), "episodes.command"),
        (lambda c: c["server"].update(command=["no-such-server-binary"]), "server.command"),
    ],
)
def test_bad_config_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, message: str
) -> None:
    raw = _base(tmp_path)
    change(raw)
    path = write_config(tmp_path / "agent.json", raw)
    code, err = _run_main(capsys, ["--config", path])
    assert code == 2
    assert len(err) == 1 and message in err[0], err
    assert err[0].startswith("spot-eval-agent: config ") or "command" in err[0]
    _nothing_written(tmp_path)
    assert not (tmp_path / "store").exists()


def test_unreachable_store_exits_75_transient_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {
        "endpoint": f"http://127.0.0.1:{free_port()}",
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "allow_http": True,
        "max_retries": 0,
        "retry_timeout": 1,
    }
    raw = agent_config("s3://bucket/evals", options, "r1", tmp_path)
    path = write_config(tmp_path / "agent.json", raw)
    code, err = _run_main(capsys, ["run", "--config", path])
    assert code == exits.STORE_UNREACHABLE == 75
    assert len(err) == 1 and "store s3://bucket/evals is unreachable" in err[0], err
    _nothing_written(tmp_path)


def test_manifest_upload_to_an_unreachable_store_exits_75(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {
        "endpoint": f"http://127.0.0.1:{free_port()}",
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "allow_http": True,
        "max_retries": 0,
        "retry_timeout": 1,
    }
    raw = agent_config("s3://bucket/evals", options, "r1", tmp_path)
    path = write_config(tmp_path / "agent.json", raw)
    manifest = write_manifest(tmp_path / "manifest.jsonl", ["e1"])
    code, err = _run_main(capsys, ["manifest", "--config", path, manifest])
    assert code == exits.STORE_UNREACHABLE
    assert len(err) == 1 and "store s3://bucket/evals is unreachable" in err[0], err


def test_exit_codes_have_one_meaning_each() -> None:
    codes = [exits.OK, exits.FAILED, exits.BAD_INPUT, exits.HARNESS_ERRORS, exits.STORE_UNREACHABLE]
    assert codes == [0, 1, 2, 3, 75]
    assert exits.PERMANENT == {2, 3} and exits.TRANSIENT == {1, 75}


def test_unreadable_or_non_json_config_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run_main(capsys, ["--config", str(tmp_path / "missing.json")])
    assert code == 2 and len(err) == 1 and "missing.json: cannot read" in err[0]
    (tmp_path / "bad.json").write_text("{not json")
    code, err = _run_main(capsys, ["--config", str(tmp_path / "bad.json")])
    assert code == 2 and len(err) == 1 and "bad.json: not JSON" in err[0]


def test_run_without_manifest_exits_2_and_says_how_to_upload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path / "agent.json", _base(tmp_path))
    code, err = _run_main(capsys, ["--config", path])
    assert code == 2 and len(err) == 1
    assert "no manifest at" in err[0] and "manifest --config" in err[0]
    _nothing_written(tmp_path)


def test_manifest_upload_is_create_only_and_refuses_a_different_one(
    any_target: StoreTarget, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = agent_config(any_target.url, any_target.options, "r1", tmp_path)
    path = write_config(tmp_path / "agent.json", raw)
    first = write_manifest(tmp_path / "m.jsonl", ["e1", "e2"])
    assert main(["manifest", "--config", path, first]) == 0
    assert main(["manifest", "--config", path, first]) == 0  # the same one again: fine
    other = write_manifest(tmp_path / "m2.jsonl", ["e1", "e2", "e3"])
    code, err = _run_main(capsys, ["manifest", "--config", path, other])
    assert code == 2 and len(err) == 1 and "manifest refused" in err[0]
    stored = Store(any_target.url, any_target.options).get("runs/r1/manifest.jsonl")
    assert stored is not None
    assert [json.loads(line)["id"] for line in stored.decode().splitlines()] == ["e1", "e2"]


def test_bad_manifest_file_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path / "agent.json", _base(tmp_path))
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"id": "e1"}\n{"id": "e1"}\n')
    code, err = _run_main(capsys, ["manifest", "--config", path, str(bad)])
    assert code == 2 and len(err) == 1 and "line 2" in err[0] and "appears twice" in err[0]
    assert not os.path.exists(tmp_path / "store" / "runs")


def test_a_budget_without_any_price_is_refused(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    raw["stop_rules"] = {"budget": 20}
    with pytest.raises(ConfigError, match=r"stop_rules\.budget: needs price\.per_hour"):
        parse(raw)
    raw["price"] = {"per_hour": 1.0}
    assert parse(raw).stop_rules.budget == 20


def test_built_config_leaves_out_what_is_not_given_and_parses() -> None:
    built = build_agent_config(
        run_id="r1",
        store="file:///tmp/spot-eval-store",
        node_id="n1",
        provider="aws",
        region="us-east-1",
        instance_type="g6.xlarge",
        server_url="http://127.0.0.1:8000",
        episodes_command=["run", "{episode_id}", "{output}"],
        concurrency=4,
        max_attempts=3,
        timeout_s=600,
        heartbeat_s=30,
    )
    assert built == {
        "run_id": "r1",
        "store": "file:///tmp/spot-eval-store",
        "node": {
            "id": "n1",
            "provider": "aws",
            "region": "us-east-1",
            "instance_type": "g6.xlarge",
            "market": "spot",
        },
        "server": {"url": "http://127.0.0.1:8000"},
        "episodes": {
            "command": ["run", "{episode_id}", "{output}"],
            "concurrency": 4,
            "max_attempts": 3,
            "timeout_s": 600,
        },
        "stop_rules": {"on_done": "exit"},
        "heartbeat_s": 30,
    }
    config = parse(built)
    assert (config.node.zone, config.server.command, config.price, config.metadata_url) == (
        None,
        (),
        None,
        None,
    )


def test_built_config_refuses_a_missing_or_unknown_argument() -> None:
    args: dict[str, Any] = {
        "run_id": "r1",
        "store": "file:///tmp/spot-eval-store",
        "node_id": "n1",
        "provider": "aws",
        "region": None,
        "instance_type": None,
        "server_url": "http://127.0.0.1:8000",
        "episodes_command": ["run", "{output}"],
        "concurrency": 1,
        "max_attempts": 1,
        "timeout_s": 60,
    }
    with pytest.raises(TypeError, match=r"^build_agent_config\(\): missing heartbeat_s; unknown heartbeat$"):
        build_agent_config(**args, heartbeat=30)  # type: ignore[call-arg]  # mypy refuses it too
    with pytest.raises(TypeError, match=r"^build_agent_config\(\): unknown zones$"):
        build_agent_config(**args, heartbeat_s=30, zones="a")  # type: ignore[call-arg]


def test_built_config_carries_every_optional_key_the_agent_reads() -> None:
    built = build_agent_config(
        run_id="r1",
        store="s3://bucket/prefix",
        node_id="n1",
        provider="runpod",
        region="EU-RO-1",
        instance_type="NVIDIA L4",
        zone="EU-RO-1a",
        server_url="http://127.0.0.1:8000",
        server_command=["vllm", "serve"],
        health_path="/health",
        ready_timeout_s=1800,
        episodes_command=["run", "{output}"],
        concurrency=2,
        max_attempts=5,
        timeout_s=60,
        heartbeat_s=10,
        on_done="exit",
        max_runtime_s=3600,
        idle_s=600,
        budget=12.5,
        price_per_hour=0.4,
        currency="EUR",
        store_options={"endpoint": "https://s3.example"},
        metadata_url="http://127.0.0.1:9",
        sigterm_grace_s=4,
        spool_dir="/workspace/spool",
        work_dir="/tmp/work",
        boot_file="/workspace/boot.json",
    )
    config = parse(built)
    assert config.node.zone == "EU-RO-1a"
    assert config.server.command == ("vllm", "serve")
    assert (config.server.health_path, config.server.ready_timeout_s) == ("/health", 1800.0)
    assert (config.stop_rules.max_runtime_s, config.stop_rules.idle_s, config.stop_rules.budget) == (
        3600,
        600,
        12.5,
    )
    assert (config.price and config.price.per_hour, config.price and config.price.currency) == (0.4, "EUR")
    assert config.store_options == {"endpoint": "https://s3.example"}
    assert (config.metadata_url, config.sigterm_grace_s) == ("http://127.0.0.1:9", 4.0)
    assert (config.spool_dir, config.work_dir, config.boot_file) == (
        "/workspace/spool",
        "/tmp/work",
        "/workspace/boot.json",
    )
