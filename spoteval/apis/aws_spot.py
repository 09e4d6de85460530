"""The AWS spot price in force: the newest Linux/UNIX entry of `DescribeSpotPriceHistory` for an
instance type (and zone).

One rule for every reader: the node agent asks the EC2 Query API itself (signed with SigV4, the
answer XML: `spot_price_now`), the control plane and the offers ask boto3 (the answer's entries:
`from_sdk`); both pick the price with `newest`. Linux/UNIX covers "Linux/UNIX (Amazon VPC)" too.
On-demand nodes have no such API (the Price List API is a different, large service).

https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/ec2/aws.sdk.kotlin.services.ec2/-ec2-client/describe-spot-price-history.html
(checked 2026-12-02: with a start time the answer holds the last change before it, "the effective
price as of the start time"; the product descriptions include "Linux/UNIX (Amazon VPC)")
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

from spoteval.apis.http import request
from spoteval.apis.imds import credentials
from spoteval.apis.sigv4 import sign_query_get
from spoteval.providers import AWS

assert AWS.price is not None and AWS.price.url is not None
EC2_API_VERSION: Final = AWS.price.version or ""
#: the regional EC2 endpoint, a format string with `{region}` (spoteval/providers/aws.py)
EC2_ENDPOINT: Final[str] = AWS.price.url
LINUX: Final = "Linux/UNIX"
#: the product descriptions asked for (the VPC one is what older accounts list)
PRODUCTS: Final = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


@dataclass(frozen=True)
class SpotPrice:
    per_hour: float
    zone: str
    #: when the price took effect, ISO 8601 as listed ("" when the entry has none)
    timestamp: str
    product: str
    instance_type: str = ""


def newest(entries: Iterable[SpotPrice], instance_type: str | None, zone: str | None) -> SpotPrice | None:
    """The newest Linux/UNIX entry for the type (any, when None) and zone (any, when empty)."""
    best: SpotPrice | None = None
    for entry in entries:
        if instance_type is not None and entry.instance_type != instance_type:
            continue
        if (zone and entry.zone != zone) or not entry.product.startswith(LINUX):
            continue
        if best is None or entry.timestamp > best.timestamp:
            best = entry
    return best


def _number(text: object) -> float | None:
    try:
        return float(str(text))
    except ValueError:
        return None


def from_sdk(history: Iterable[Mapping[str, Any]]) -> list[SpotPrice]:
    """boto3's `SpotPriceHistory` entries (timestamps as datetimes) as prices; unpriced ones dropped."""
    out = []
    for e in history:
        price = _number(e.get("SpotPrice")) if "SpotPrice" in e else None
        if price is None:
            continue
        stamp = e.get("Timestamp")
        text = stamp.astimezone(timezone.utc).isoformat() if isinstance(stamp, datetime) else ""
        out.append(
            SpotPrice(
                price,
                str(e.get("AvailabilityZone") or ""),
                text,
                str(e.get("ProductDescription", "")),
                str(e.get("InstanceType") or ""),
            )
        )
    return out


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def from_xml(body: bytes) -> list[SpotPrice]:
    """The priced entries of a DescribeSpotPriceHistory XML answer; ValueError when it is not XML."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ValueError(f"DescribeSpotPriceHistory answer is not XML: {exc}") from None
    out = []
    for item in root.iter():
        if _local(item.tag) != "item":
            continue
        fields = {_local(child.tag): (child.text or "").strip() for child in item}
        price = _number(fields["spotPrice"]) if "spotPrice" in fields else None
        if price is None:
            continue
        out.append(
            SpotPrice(
                price,
                fields.get("availabilityZone", ""),
                fields.get("timestamp", ""),
                fields.get("productDescription", ""),
                fields.get("instanceType", ""),
            )
        )
    return out


def parse_spot_price_history(body: bytes, zone: str) -> SpotPrice | None:
    """The newest Linux/UNIX entry for `zone` in a DescribeSpotPriceHistory XML answer."""
    return newest(from_xml(body), None, zone)


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
        "ProductDescription.1": LINUX,
        "AvailabilityZone": zone,
        "StartTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    url, headers = sign_query_get(
        endpoint or EC2_ENDPOINT.format(region=region), params, creds, region=region, service="ec2", now=when
    )
    reply = request(url, headers=headers, timeout=timeout_s)
    if reply.status != 200:
        raise OSError(f"DescribeSpotPriceHistory answered {reply.status}: {reply.body[:200]!r}")
    return parse_spot_price_history(reply.body, zone)
