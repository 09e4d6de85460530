"""The agent reads the AWS spot price itself: a Signature V4 request with the instance role's keys."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from spoteval.agent import aws_price
from spoteval.agent.config import parse
from spoteval.agent.price import resolve_price
from tests import servers
from tests.fake_metadata import FakeAws, _json, _Request, _text, agent_config


class FakeImdsWithRole(FakeAws):
    """IMDSv2 that also hands out an instance role's temporary credentials."""

    def __init__(self) -> None:
        self.credential_reads = 0
        super().__init__()

    def handle(self, req: _Request) -> tuple[int, dict[str, str], bytes]:
        if req.path.startswith("/latest/meta-data/iam/security-credentials/"):
            if req.headers.get("x-aws-ec2-metadata-token") not in self.tokens:
                return _text(401, "Unauthorized")
            role = req.path.rsplit("/", 1)[-1]
            if not role:
                return _text(200, "spot-eval-node\n")
            if role != "spot-eval-node":
                return _text(404, "Not Found")
            self.credential_reads += 1
            return _json(
                200,
                {"AccessKeyId": "ASIATESTNODE", "SecretAccessKey": "node-secret", "Token": "session-token"},
            )
        return super().handle(req)


def test_signature_matches_botocore_for_the_same_request() -> None:
    creds = aws_price.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "tok/en+=")
    params = {
        "Action": "DescribeSpotPriceHistory",
        "Version": "2016-11-15",
        "InstanceType.1": "g6.xlarge",
        "ProductDescription.1": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "StartTime": "2026-11-30T05:00:00Z",
    }
    query = "&".join(f"{k}={aws_price._quote(v)}" for k, v in sorted(params.items()))
    request = AWSRequest(method="GET", url=f"https://ec2.us-east-1.amazonaws.com/?{query}")
    SigV4Auth(
        BotoCredentials(creds.access_key_id, creds.secret_access_key, creds.session_token), "ec2", "us-east-1"
    ).add_auth(request)
    when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    url, headers = aws_price.sign_query_get(
        "https://ec2.us-east-1.amazonaws.com/", params, creds, region="us-east-1", service="ec2", now=when
    )
    assert url == request.url
    assert headers["Authorization"] == request.headers["Authorization"]
    assert headers["x-amz-security-token"] == "tok/en+="


def test_newest_entry_for_the_zone_is_the_price_in_force() -> None:
    body = b"""<?xml version="1.0"?>
    <DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
      <spotPriceHistorySet>
        <item><instanceType>g6.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>
          <spotPrice>0.3100</spotPrice><timestamp>2026-11-30T04:00:00.000Z</timestamp>
          <availabilityZone>us-east-1a</availabilityZone></item>
        <item><instanceType>g6.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>
          <spotPrice>0.3500</spotPrice><timestamp>2026-11-30T04:30:00.000Z</timestamp>
          <availabilityZone>us-east-1a</availabilityZone></item>
        <item><instanceType>g6.xlarge</instanceType><productDescription>Linux/UNIX</productDescription>
          <spotPrice>0.1000</spotPrice><timestamp>2026-11-30T04:59:00.000Z</timestamp>
          <availabilityZone>us-east-1b</availabilityZone></item>
        <item><instanceType>g6.xlarge</instanceType><productDescription>Windows</productDescription>
          <spotPrice>0.9000</spotPrice><timestamp>2026-11-30T04:59:00.000Z</timestamp>
          <availabilityZone>us-east-1a</availabilityZone></item>
      </spotPriceHistorySet>
    </DescribeSpotPriceHistoryResponse>"""
    found = aws_price.parse_spot_price_history(body, "us-east-1a")
    assert found is not None
    assert found.per_hour == pytest.approx(0.35)
    assert found.timestamp.startswith("2026-11-30T04:30")
    assert aws_price.parse_spot_price_history(body, "us-west-2a") is None
    with pytest.raises(ValueError, match="not XML"):
        aws_price.parse_spot_price_history(b"<oops", "us-east-1a")


def _config(tmp_path: Path, **extra: Any) -> Any:
    raw = agent_config(f"file://{tmp_path}/store", {}, "r1", tmp_path, provider="aws", **extra)
    raw["node"].update(
        {"region": "us-east-1", "zone": "us-east-1a", "instance_type": "g6.xlarge", "market": "spot"}
    )
    return parse(json.loads(json.dumps(raw)))


def test_agent_reads_the_spot_price_from_ec2_with_the_role_credentials(
    tmp_path: Path, moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    imds = FakeImdsWithRole()
    try:
        # moto answers DescribeSpotPriceHistory in seconds on a loaded machine (it builds every
        # type's history): the request may take as long as it needs here
        config = _config(tmp_path, metadata_url=imds.url, price_api_url=moto_server.url, price_timeout_s=300)
        price = resolve_price(config)
    finally:
        imds.close()
    # moto lists a nominal spot price for every type and zone; it answers only a request that its
    # router recognises as EC2, i.e. one whose signature scope names the ec2 service.
    assert price.source == "api"
    assert price.per_hour == pytest.approx(0.00001)
    assert price.currency == "USD"
    assert imds.credential_reads == 1


def test_configured_price_wins_and_on_demand_is_not_read(tmp_path: Path) -> None:
    configured = _config(tmp_path, price={"per_hour": 0.5, "currency": "USD"})
    assert resolve_price(configured).source == "configured"
    raw = agent_config(f"file://{tmp_path}/store", {}, "r1", tmp_path, provider="aws")
    raw["node"].update({"region": "us-east-1", "zone": "us-east-1a", "instance_type": "g6.xlarge"})
    raw["node"]["market"] = "on_demand"
    on_demand = resolve_price(parse(raw))
    assert on_demand.source == "unknown"
    assert "on-demand" in str(on_demand.details["price_error"])


def test_no_role_and_no_keys_gives_unknown_price_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    imds = FakeAws()  # no iam/security-credentials: a node without an instance role
    try:
        price = resolve_price(_config(tmp_path, metadata_url=imds.url, price_api_url="http://127.0.0.1:9"))
    finally:
        imds.close()
    assert price.source == "unknown"
    assert price.per_hour is None
    assert "instance role" in str(price.details["price_error"])
