"""The stand-in model server and the sample episode, against a real server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spoteval import sample_episode, standin
from tests.servers import REPO, free_port


@pytest.fixture
def server() -> Iterator[standin.StandinServer]:
    srv = standin.serve("127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _post(url: str, body: object) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_health_and_models_answer_like_an_openai_server(server: standin.StandinServer) -> None:
    assert _get(server.base_url + "/health") == (200, {"status": "ok"})
    status, models = _get(server.base_url + "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["standin"]


def test_completions_are_deterministic_per_prompt(server: standin.StandinServer) -> None:
    body = {"model": "standin", "prompt": "What is 2+2?", "max_tokens": 4}
    s1, first = _post(server.base_url + "/v1/completions", body)
    s2, second = _post(server.base_url + "/v1/completions", body)
    s3, other = _post(server.base_url + "/v1/completions", {**body, "prompt": "Something else"})
    assert s1 == s2 == s3 == 200
    assert first["object"] == "text_completion"
    assert first["choices"][0]["text"] == second["choices"][0]["text"]
    assert first["choices"][0]["text"] != other["choices"][0]["text"]
    assert len(first["choices"][0]["text"].split()) == 4
    assert first["usage"]["completion_tokens"] == 4


def test_chat_completions_answer_as_assistant(server: standin.StandinServer) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, answer = _post(server.base_url + "/v1/chat/completions", body)
    assert status == 200
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "m"
    message = answer["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["content"] == standin.answer_text("user: hi")


def test_bad_requests_get_openai_style_errors(server: standin.StandinServer) -> None:
    status, body = _post(server.base_url + "/v1/completions", {"prompt": 3})
    assert status == 400
    assert "prompt" in body["error"]["message"]
    status, body = _post(server.base_url + "/v1/chat/completions", {"messages": []})
    assert status == 400
    status, _ = _get(server.base_url + "/nope")
    assert status == 404


def test_startup_delay_answers_503_until_ready() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spoteval.standin", "--port", str(port), "--startup-delay", "0.6"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"standin serving on http://127.0.0.1:{port}"
        assert _get(f"http://127.0.0.1:{port}/health") == (503, {"status": "starting"})
        status, _ = _post(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "x"})
        assert status == 503
        time.sleep(0.7)
        assert _get(f"http://127.0.0.1:{port}/health") == (200, {"status": "ok"})
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def test_sample_episode_writes_result_from_the_model(server: standin.StandinServer, tmp_path: Path) -> None:
    out = tmp_path / "e1.json"
    code = sample_episode.main(
        ["--episode-id", "e1", "--model-url", server.base_url, "--output", str(out), "--seconds", "0.05"]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["episode_id"] == "e1"
    assert result["answer"] == standin.answer_text("Episode e1: answer briefly.", 8)
    assert result["seconds"] >= 0.05


def test_sample_episode_failures_are_deterministic_per_episode(
    server: standin.StandinServer, tmp_path: Path
) -> None:
    ids = [f"e{i}" for i in range(40)]
    failing = [e for e in ids if sample_episode.will_fail(e, 0.3, seed=7)]
    assert 0 < len(failing) < len(ids)
    for e in (failing[0], next(x for x in ids if x not in failing)):
        out = tmp_path / f"{e}.json"
        argv = ["--episode-id", e, "--model-url", server.base_url, "--output", str(out)]
        codes = {sample_episode.main([*argv, "--fail-rate", "0.3", "--seed", "7"]) for _ in range(2)}
        assert codes == ({1} if e in failing else {0})
        assert out.exists() == (e not in failing)


def test_sample_episode_fails_when_the_model_server_is_down(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code = sample_episode.main(["--episode-id", "e1", "--model-url", url, "--output", str(tmp_path / "o")])
    assert code == 1
    assert not (tmp_path / "o").exists()
