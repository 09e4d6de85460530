"""The agent works with the AWS node's narrowed permissions: every S3 request a real run makes (the
manifest upload, the agent's run with results, attempts and events, the bundle read at boot),
recorded on its way to a moto server, is allowed by the node role's policy and not denied by the
bucket policy (components/privilege.py), evaluated the way IAM evaluates them: an explicit deny
wins, else an allow whose action, resource and conditions match. And what the node must not do
(overwrite, write outside its run, delete, rewrite its bundle) is refused."""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from components.bundle import OBJECT_KEY
from components.privilege import aws_create_only_statement, aws_node_statements
from spoteval.agent.__main__ import main as agent_main
from spoteval.store import Store
from tests import servers
from tests.fake_metadata import agent_config, episode_command, start_agent, write_config, write_manifest

BUCKET = "results"
ARN = f"arn:aws:s3:::{BUCKET}"
RUN = "least-priv"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]


class RecordingProxy(http.server.ThreadingHTTPServer):
    """Forwards every request to moto and records it."""

    def __init__(self, target: str) -> None:
        self.target = urllib.parse.urlsplit(target).netloc
        self.seen: list[Request] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingProxy

    def _forward(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        split = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        with self.server.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            self.server.seen.append(Request(self.command, urllib.parse.unquote(split.path), query, headers))
        upstream = http.client.HTTPConnection(self.server.target, timeout=30)
        upstream.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
        reply = upstream.getresponse()
        data = reply.read()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def proxy(moto_server: servers.Server) -> Iterator[RecordingProxy]:
    servers.moto_reset(moto_server)
    servers.create_s3_bucket(moto_server, BUCKET)
    server = RecordingProxy(moto_server.url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


# --- IAM's evaluation, for the condition operators these policies use -----------------------------


def s3_request(r: Request) -> tuple[str, str, dict[str, str | None]]:
    """(action, resource ARN, condition context) of one S3 request (path-style)."""
    bucket, _, key = r.path.lstrip("/").partition("/")
    assert bucket == BUCKET, r
    if not key and r.method == "GET" and "list-type" in r.query:
        return "s3:ListBucket", ARN, {"s3:prefix": r.query.get("prefix", "")}
    if key and r.method in ("GET", "HEAD"):
        return "s3:GetObject", f"{ARN}/{key}", {}
    if key and r.method == "PUT" and "partNumber" not in r.query:
        context: dict[str, str | None] = {
            "s3:if-none-match": r.headers.get("if-none-match"),
            "s3:ObjectCreationOperation": "true",
        }
        return "s3:PutObject", f"{ARN}/{key}", context
    if key and r.method == "DELETE":
        return "s3:DeleteObject", f"{ARN}/{key}", {}
    raise AssertionError(f"an S3 request these tests do not model: {r}")


def _listed(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _condition_holds(
    condition: Mapping[str, Mapping[str, object]], context: Mapping[str, str | None]
) -> bool:
    for operator, keys in condition.items():
        for key, wanted in keys.items():
            have = context.get(key)
            if operator == "Null":
                if (have is None) != (str(wanted) == "true"):
                    return False
            elif have is None:
                return False
            elif operator == "StringLike":
                if not any(fnmatchcase(have, w) for w in _listed(wanted)):
                    return False
            elif operator in ("StringEquals", "Bool"):
                if have not in _listed(wanted):
                    return False
            else:
                raise AssertionError(f"condition operator {operator} is not modelled")
    return True


def _matches(
    statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str | None]
) -> bool:
    return (
        any(fnmatchcase(action, a) for a in _listed(statement["Action"]))
        and any(fnmatchcase(resource, r) for r in _listed(statement["Resource"]))
        and _condition_holds(statement.get("Condition", {}), context)
    )


def allowed(action: str, resource: str, context: Mapping[str, str | None]) -> bool:
    identity = aws_node_statements(ARN, RUN)
    bucket = [aws_create_only_statement(ARN)]
    if any(s["Effect"] == "Deny" and _matches(s, action, resource, context) for s in identity + bucket):
        return False
    return any(s["Effect"] == "Allow" and _matches(s, action, resource, context) for s in identity)


# --- the tests --------------------------------------------------------------------------------------


def test_a_real_run_s_requests_are_all_allowed(tmp_path: Path, proxy: RecordingProxy) -> None:
    options = {
        "endpoint": proxy.url,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "allow_http": True,
    }
    Store(f"s3://{BUCKET}", options).put_new(OBJECT_KEY, b"bundle")  # what `pulumi up` uploads
    proxy.seen.clear()
    raw = agent_config(
        f"s3://{BUCKET}", options, RUN, tmp_path, concurrency=2, command=episode_command(seconds=0.05)
    )
    config = write_config(tmp_path / "agent.json", raw)
    assert Store(f"s3://{BUCKET}", options).get(OBJECT_KEY) == b"bundle"  # the boot reads its bundle
    assert (
        agent_main(["manifest", "--config", config, write_manifest(tmp_path / "m.jsonl", ["e1", "e2"])]) == 0
    )
    agent = start_agent(config, tmp_path)
    assert agent.wait(120) == 0, agent.stderr()
    requests = [s3_request(r) for r in proxy.seen]
    kinds = {action for action, _, _ in requests}
    assert kinds == {"s3:ListBucket", "s3:GetObject", "s3:PutObject"}
    puts = [resource for action, resource, _ in requests if action == "s3:PutObject"]
    assert any(p.endswith("/results/e1.json") for p in puts) and any("/events/" in p for p in puts)
    refused = [(a, res, ctx) for a, res, ctx in requests if not allowed(a, res, ctx)]
    assert refused == []


def test_what_the_node_must_not_do_is_refused() -> None:
    run_key = f"{ARN}/runs/{RUN}/results/e1.json"
    create = {"s3:if-none-match": "*", "s3:ObjectCreationOperation": "true"}
    assert allowed("s3:PutObject", run_key, create)
    assert not allowed("s3:PutObject", run_key, {**create, "s3:if-none-match": None})  # overwrite
    assert not allowed("s3:PutObject", f"{ARN}/runs/other-run/results/e1.json", create)
    assert not allowed("s3:PutObject", f"{ARN}/{OBJECT_KEY}", create)  # its own bundle
    assert not allowed("s3:DeleteObject", run_key, {})
    assert not allowed("s3:GetObject", f"{ARN}/runs/other-run/results/e1.json", {})
    assert not allowed("s3:ListBucket", ARN, {"s3:prefix": "runs/"})
