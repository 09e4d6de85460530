"""The AWS spot price in force for this node, read on the node with the standard library alone.

`DescribeSpotPriceHistory` is a signed EC2 Query API call. The node has no AWS SDK, so this module
signs the request itself (Signature Version 4) with the instance role's temporary credentials,
taken from IMDSv2 (`iam/security-credentials/{role}`), or from the standard AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN variables when they are set. The stack's node role allows
`ec2:DescribeSpotPriceHistory` for exactly this.

The newest price entry for the node's instance type and zone (Linux/UNIX) is the price in force.
On-demand nodes have no such API (the Price List API is a different, large service); their price
comes from the config.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

from spoteval.agent.notices import http
from spoteval.providers import AWS

assert AWS.metadata is not None and AWS.price is not None and AWS.price.url is not None
_IMDS: Final = AWS.metadata
EC2_API_VERSION: Final = AWS.price.version or ""
#: the regional EC2 endpoint, a format string with `{region}` (spoteval/providers.py)
EC2_ENDPOINT: Final[str] = AWS.price.url
IMDS_DEFAULT: Final = _IMDS.base_url
#: lifetime asked for the IMDSv2 token of one credentials read
_TOKEN_TTL_S: Final = 300
_ALGORITHM: Final = "AWS4-HMAC-SHA256"


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


@dataclass(frozen=True)
class SpotPrice:
    per_hour: float
    zone: str
    timestamp: str
    product: str


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="-_.~")


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sign_query_get(
    url: str,
    params: Mapping[str, str],
    creds: Credentials,
    *,
    region: str,
    service: str,
    now: datetime,
) -> tuple[str, dict[str, str]]:
    """Signature Version 4 for a GET with a query string: (full URL, headers to send)."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.netloc
    path = parsed.path or "/"
    amz_date = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))
    headers = {"host": host, "x-amz-date": amz_date}
    if creds.session_token:
        headers["x-amz-security-token"] = creds.session_token
    signed = ";".join(sorted(headers))
    canonical_headers = "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers))
    payload_hash = hashlib.sha256(b"").hexdigest()
    canonical = "\n".join(["GET", path, query, canonical_headers, signed, payload_hash])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([_ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + creds.secret_access_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k: v for k, v in headers.items() if k != "host"}
    credential = f"{creds.access_key_id}/{scope}"
    out["Authorization"] = (
        f"{_ALGORITHM} Credential={credential}, SignedHeaders={signed}, Signature={signature}"
    )
    return f"{parsed.scheme}://{host}{path}?{query}", out


def credentials(metadata_url: str | None, environ: Mapping[str, str] | None = None) -> Credentials:
    """The standard variables, else the instance role's credentials from IMDSv2; OSError if neither."""
    env = os.environ if environ is None else environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
        )
    base = (metadata_url or IMDS_DEFAULT).rstrip("/")
    assert _IMDS.token_ttl_header is not None and _IMDS.token_header is not None
    token = http(
        base + _IMDS.paths["token"], method="PUT", headers={_IMDS.token_ttl_header: str(_TOKEN_TTL_S)}
    )
    if token.status != 200 or not token.body:
        raise OSError(f"IMDSv2 token request answered {token.status}")
    auth = {_IMDS.token_header: token.body.decode().strip()}
    roles_path = _IMDS.paths["credentials"]
    roles = http(base + roles_path, headers=auth)
    if roles.status != 200 or not roles.body.strip():
        raise OSError(f"the node has no instance role (iam/security-credentials answered {roles.status})")
    role = roles.body.decode().split()[0]
    reply = http(base + roles_path + role, headers=auth)
    if reply.status != 200:
        raise OSError(f"iam/security-credentials/{role} answered {reply.status}")
    doc = json.loads(reply.body)
    try:
        return Credentials(str(doc["AccessKeyId"]), str(doc["SecretAccessKey"]), doc.get("Token"))
    except KeyError as exc:
        raise OSError(f"instance role credentials lack {exc}") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_spot_price_history(body: bytes, zone: str) -> SpotPrice | None:
    """The newest Linux/UNIX entry for `zone` in a DescribeSpotPriceHistory XML answer."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ValueError(f"DescribeSpotPriceHistory answer is not XML: {exc}") from None
    best: SpotPrice | None = None
    for item in root.iter():
        if _local(item.tag) != "item":
            continue
        fields = {_local(child.tag): (child.text or "").strip() for child in item}
        if fields.get("availabilityZone") != zone or "spotPrice" not in fields:
            continue
        product = fields.get("productDescription", "")
        if not product.startswith("Linux/UNIX"):
            continue
        try:
            price = float(fields["spotPrice"])
        except ValueError:
            continue
        stamp = fields.get("timestamp", "")
        if best is None or stamp > best.timestamp:
            best = SpotPrice(price, zone, stamp, product)
    return best


def spot_price_now(
    region: str,
    zone: str,
    instance_type: str,
    *,
    metadata_url: str | None = None,
    endpoint: str | None = None,
    now: datetime | None = None,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> SpotPrice | None:
    """Ask EC2 for the current spot price of `instance_type` in `zone`; None when it lists none."""
    creds = credentials(metadata_url, environ)
    when = now or datetime.now(timezone.utc)
    params = {
        "Action": "DescribeSpotPriceHistory",
        "Version": EC2_API_VERSION,
        "InstanceType.1": instance_type,
        "ProductDescription.1": "Linux/UNIX",
        "AvailabilityZone": zone,
        "StartTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    url, headers = sign_query_get(
        endpoint or EC2_ENDPOINT.format(region=region),
        params,
        creds,
        region=region,
        service="ec2",
        now=when,
    )
    reply = http(url, headers=headers, timeout=timeout_s)
    if reply.status != 200:
        raise OSError(f"DescribeSpotPriceHistory answered {reply.status}: {reply.body[:200]!r}")
    return parse_spot_price_history(reply.body, zone)
