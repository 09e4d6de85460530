"""The AWS spot price in force for this node, read on the node with the standard library alone.

`DescribeSpotPriceHistory` is a signed EC2 Query API call: `spoteval.apis.aws_spot` signs it
(`spoteval.apis.sigv4`) with the instance role's temporary credentials from IMDSv2, or the standard
AWS_* variables (`spoteval.apis.imds`). The stack's node role allows `ec2:DescribeSpotPriceHistory`
for exactly this. The newest Linux/UNIX entry for the node's instance type and zone is the price in
force; on-demand nodes have no such API, their price comes from the config.
"""

from __future__ import annotations

from spoteval.apis.aws_spot import (
    EC2_API_VERSION,
    EC2_ENDPOINT,
    SpotPrice,
    parse_spot_price_history,
    spot_price_now,
)
from spoteval.apis.imds import DEFAULT_URL as IMDS_DEFAULT
from spoteval.apis.imds import Credentials, credentials
from spoteval.apis.sigv4 import quote as _quote
from spoteval.apis.sigv4 import sign_query_get

__all__ = [
    "EC2_API_VERSION",
    "EC2_ENDPOINT",
    "IMDS_DEFAULT",
    "Credentials",
    "SpotPrice",
    "_quote",
    "credentials",
    "parse_spot_price_history",
    "sign_query_get",
    "spot_price_now",
]
