"""Real servers on loopback for the tests: moto (S3 + EC2), Azurite (Azure Blob), the GCS emulator.

Each `start_*` function launches the server as a child process on a free port of 127.0.0.1, waits
until it answers, and returns a `Server` whose `stop()` ends it; the launcher (and moto's, which the
drill uses too) is spoteval/loopback.py. `tests/conftest.py` wraps them in session fixtures.
Nothing here reaches beyond loopback.
"""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spoteval import loopback
from spoteval.loopback import LaunchError, Server, free_port, launch

__all__ = ["REPO", "Server", "free_port"]

REPO = Path(__file__).resolve().parent.parent

# Azurite's well-known development account (public, documented; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _launch(name: str, argv: Sequence[str], port: int, probe: str, timeout: float = 60.0) -> Server:
    try:
        return launch(name, argv, port, probe, timeout=timeout)
    except LaunchError as exc:
        raise RuntimeError(str(exc)) from None


def start_moto() -> Server:
    """moto in server mode: S3 and EC2 (spot instances, stop/start, spot price history)."""
    try:
        server = loopback.start_moto()
    except LaunchError as exc:
        raise RuntimeError(str(exc)) from None
    server.env = {
        "AWS_ENDPOINT_URL": server.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    return server


def moto_reset(server: Server) -> None:
    """Forget every bucket and instance (moto's reset API)."""
    req = urllib.request.Request(f"{server.url}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).close()


def s3_store_options(server: Server) -> dict[str, Any]:
    return loopback.s3_options(server, "testing")


def create_s3_bucket(server: Server, bucket: str) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=bucket)


def azurite_binary() -> Path | None:
    path = REPO / ".tools" / "node_modules" / ".bin" / "azurite-blob"
    return path if path.exists() else None


def start_azurite() -> Server:
    """Azurite's Blob service (installed by `make test` into .tools/ from the npm registry)."""
    binary = azurite_binary()
    if binary is None:
        raise RuntimeError("Azurite is not installed: run `make test` (it installs it into .tools/)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="spoteval-azurite-data-")
    argv = [
        str(binary),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        workdir,
        "--skipApiVersionCheck",
        "--loose",
        "--silent",
    ]
    server = _launch("azurite", argv, port, "/")
    server.env = {"AZURITE_DATA": workdir}
    return server


def azure_store_options(server: Server) -> dict[str, Any]:
    return {
        "account_name": AZURITE_ACCOUNT,
        "account_key": AZURITE_KEY,
        "endpoint": f"{server.url}/{AZURITE_ACCOUNT}",
        "allow_http": True,
    }


def create_azure_container(server: Server, container: str) -> None:
    """Create a container with Azure's REST API (Shared Key auth), no SDK needed."""
    import base64
    import hashlib
    import hmac
    from email.utils import formatdate

    date = formatdate(usegmt=True)
    version = "2021-08-06"
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container"
    canonical_headers = f"x-ms-date:{date}\nx-ms-version:{version}\n"
    to_sign = "PUT\n\n\n\n\n\n\n\n\n\n\n\n" + canonical_headers + resource
    key = base64.b64decode(AZURITE_KEY)
    signature = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
    req = urllib.request.Request(
        f"{server.url}/{AZURITE_ACCOUNT}/{container}?restype=container",
        method="PUT",
        headers={
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}",
            "Content-Length": "0",
        },
    )
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already exists
            raise
