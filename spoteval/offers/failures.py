"""A price read that failed, as one line: the API that failed, what it said (no HTML), and the fix.

Each provider's reader raises `PriceUnavailable` with whatever its API or client said; `explain`
turns that into the line every offer of that provider and market carries:

    AWS Price List GetProducts failed: HTTP 500, an HTML page instead of the API's answer; check the
    endpoint: AWS_ENDPOINT_URL_PRICING (now AWS_ENDPOINT_URL=http://127.0.0.1:5000)

The endpoint named is the setting to change, with the value in force when the read failed (the
setting itself or the wider one it falls back to, as the client reads them), or what is used when
none is set.

What is wrong is guessed from the words of the answer: credentials (a missing key, 401, 403, a
refused signature) or the endpoint (no connection, a name that does not resolve, an HTML page,
404, 5xx); when the words say neither, both are named.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: the AWS SDK's credentials, as boto3 reads them
_AWS_CREDENTIALS: Final = "AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"


@dataclass(frozen=True)
class Endpoint:
    """Where a price API is: the settings that move it (the first is the one to set; the client
    falls back to the next ones in order) and what is used when none is set."""

    settings: tuple[str, ...]
    default: str

    def describe(self, env: Mapping[str, str]) -> str:
        """The setting to change, with the value in force: `NAME (now VALUE)` or `NAME (unset: DEFAULT)`."""
        first = self.settings[0]
        for name in self.settings:
            value = env.get(name, "")
            if value:
                return f"{first} (now {value})" if name == first else f"{first} (now {name}={value})"
        return f"{first} (unset: {self.default})"


@dataclass(frozen=True)
class PriceApi:
    """One price API as a user sets it up: its name, how it is given credentials, where it is."""

    name: str
    credentials: str | None
    endpoint: Endpoint | None


_GCP: Final = PriceApi(
    "GCP Cloud Billing Catalog",
    "an API key in SPOTEVAL_GCP_BILLING_API_KEY",
    Endpoint(("SPOTEVAL_GCP_CATALOG_URL",), "Google's"),
)
_AZURE: Final = PriceApi(
    "Azure Retail Prices", None, Endpoint(("SPOTEVAL_AZURE_PRICES_URL",), "the public Retail Prices API")
)
_RUNPOD: Final = PriceApi(
    "Runpod REST v2 catalog", "RUNPOD_API_KEY", Endpoint(("RUNPOD_REST_URL",), "Runpod's own")
)
_NEBIUS: Final = PriceApi("Nebius SpotPriceService.List", "NEBIUS_IAM_TOKEN, or a Nebius CLI profile", None)

#: (provider, market) -> the API that prices it (endpoint settings: spoteval/offers/build.py)
APIS: Final[dict[tuple[str, str], PriceApi]] = {
    ("aws", "spot"): PriceApi(
        "EC2 DescribeSpotPriceHistory",
        _AWS_CREDENTIALS,
        Endpoint(("AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL"), "AWS itself"),
    ),
    ("aws", "on_demand"): PriceApi(
        "AWS Price List GetProducts",
        _AWS_CREDENTIALS,
        Endpoint(("AWS_ENDPOINT_URL_PRICING", "AWS_ENDPOINT_URL"), "AWS itself"),
    ),
    ("gcp", "spot"): _GCP,
    ("gcp", "on_demand"): _GCP,
    ("azure", "spot"): _AZURE,
    ("azure", "on_demand"): _AZURE,
    ("runpod", "spot"): _RUNPOD,
    ("runpod", "on_demand"): _RUNPOD,
    ("nebius", "spot"): _NEBIUS,
    ("nebius", "on_demand"): _NEBIUS,
}

#: the readers' own label in front of their messages, dropped (the API is named once, by `explain`)
_READER_PREFIX: Final = re.compile(
    r"^(DescribeSpotPriceHistory in \S+|Price List API(?: GetProducts)?|Retail Prices|"
    r"Cloud Billing Catalog|Catalog|SpotPriceService\.List): "
)
_HTML: Final = re.compile(r"<\s*(!doctype|html|head|body|title|h1|p)\b", re.IGNORECASE)
_STATUS: Final = re.compile(r"(?<![\d.])([45]\d\d)(?![\d.])")
_CREDENTIALS: Final = re.compile(
    r"credential|unauthori[sz]ed|forbidden|(?<!\d)40[13](?!\d)|api key|access ?denied|signature|"
    r"not set|token|AuthFailure|InvalidClientTokenId|permission",
    re.IGNORECASE,
)
_ENDPOINT: Final = re.compile(
    r"connect|refused|resolve|timed? ?out|name or service|unreachable|(?<!\d)404(?!\d)|(?<!\d)5\d\d(?!\d)|"
    r"ssl|certificate|no route|html|endpoint",
    re.IGNORECASE,
)
_MAX: Final = 200


def clean(text: str) -> str:
    """What an API said, as one short line: the reader's label dropped, an HTML page named, not shown."""
    text = _READER_PREFIX.sub("", text.strip())
    page = _HTML.search(text)
    if page is not None:
        status = _STATUS.search(text[: page.start()])
        text = (f"HTTP {status.group(1)}, " if status else "") + "an HTML page instead of the API's answer"
    home = os.path.expanduser("~")
    if len(home) > 1:
        text = text.replace(home + os.sep, "~" + os.sep)  # a path in the user's home, as they write it
    text = " ".join(text.split())
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def explain(provider: str, market: str, text: str, env: Mapping[str, str] | None = None) -> str:
    """The one line for a failed price read of `provider`'s `market` (see the module docstring);
    `env` is where the endpoint settings are read (the process's environment by default)."""
    env = os.environ if env is None else env
    api = APIS.get((provider, market), PriceApi(f"the {provider} price API", None, None))
    detail = clean(text)
    credentials = _CREDENTIALS.search(text) is not None
    endpoint = _ENDPOINT.search(text) is not None or _HTML.search(text) is not None
    fixes: list[str] = []
    if credentials and api.credentials:
        fixes.append(f"the credentials: {api.credentials}")
    where = api.endpoint.describe(env) if api.endpoint else None
    if endpoint and where:
        fixes.append(f"the endpoint: {where}")
    if not fixes:
        fixes = [f"the credentials: {api.credentials}"] if api.credentials else []
        fixes += [f"the endpoint: {where}"] if where else []
    fixes = [f for f in fixes if not _already_named(f, detail)]
    fix = f"; check {' and '.join(fixes)}" if fixes else ""
    return f"{api.name} failed: {detail}{fix}"


def _already_named(fix: str, detail: str) -> bool:
    """The answer itself names the setting the fix would (`... needs an API key (SPOTEVAL_...)`)."""
    names = re.findall(r"\b[A-Z][A-Z0-9_]{3,}\b", fix)
    return bool(names) and all(name in detail for name in names)
