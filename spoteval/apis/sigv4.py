"""AWS Signature Version 4 for Query API calls, with the standard library: a GET whose parameters
are the query string (EC2 `DescribeSpotPriceHistory`, Auto Scaling), and a form-encoded POST
(CloudWatch `PutMetricData`, as the AWS SDKs send it).

https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html
(checked 2026-12-02; the signer is tested against botocore's: tests/test_agent_aws_price.py)
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Final

from spoteval.apis.imds import Credentials

ALGORITHM: Final = "AWS4-HMAC-SHA256"
FORM_CONTENT_TYPE: Final = "application/x-www-form-urlencoded; charset=utf-8"


def quote(value: str) -> str:
    """Percent-encoding as SigV4 wants it: everything but the unreserved characters."""
    return urllib.parse.quote(value, safe="-_.~")


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k)}={quote(v)}" for k, v in sorted(params.items()))


def sign(
    method: str,
    url: str,
    creds: Credentials,
    *,
    query: str,
    body: bytes,
    headers: Mapping[str, str],
    region: str,
    service: str,
    now: datetime,
) -> dict[str, str]:
    """The headers to send with one request (`headers` besides `host`, `x-amz-date`, the session
    token and `Authorization`); `query` is already canonical."""
    parsed = urllib.parse.urlsplit(url)
    amz_date = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    all_headers = {
        **{k.lower(): v for k, v in headers.items()},
        "host": parsed.netloc,
        "x-amz-date": amz_date,
    }
    if creds.session_token:
        all_headers["x-amz-security-token"] = creds.session_token
    signed = ";".join(sorted(all_headers))
    canonical_headers = "".join(f"{k}:{all_headers[k].strip()}\n" for k in sorted(all_headers))
    payload_hash = hashlib.sha256(body).hexdigest()
    canonical = "\n".join([method, parsed.path or "/", query, canonical_headers, signed, payload_hash])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + creds.secret_access_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k: v for k, v in all_headers.items() if k != "host"}
    out["Authorization"] = (
        f"{ALGORITHM} Credential={creds.access_key_id}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    return out


def sign_query_get(
    url: str,
    params: Mapping[str, str],
    creds: Credentials,
    *,
    region: str,
    service: str,
    now: datetime,
) -> tuple[str, dict[str, str]]:
    """A GET with a query string: (full URL, headers to send)."""
    parsed = urllib.parse.urlsplit(url)
    query = canonical_query(params)
    headers = sign(
        "GET", url, creds, query=query, body=b"", headers={}, region=region, service=service, now=now
    )
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path or '/'}?{query}", headers


def sign_form_post(
    url: str,
    params: Mapping[str, str],
    creds: Credentials,
    *,
    region: str,
    service: str,
    now: datetime,
) -> tuple[bytes, dict[str, str]]:
    """A form-encoded Query API POST: (body, headers to send)."""
    body = canonical_query(params).encode()
    headers = {"content-type": FORM_CONTENT_TYPE}
    return body, sign(
        "POST", url, creds, query="", body=body, headers=headers, region=region, service=service, now=now
    )
