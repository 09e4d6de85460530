"""The drill's S3 store (`--store s3`): a moto server on loopback, its log in the drill's folder,
and the drill's bucket in it."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from spoteval import loopback
from spoteval.drill.config import DrillError
from spoteval.loopback import LaunchError


def start_moto(out: Path) -> loopback.Server:
    """The moto server for `--store s3`, its log in `out/moto.log`."""
    if loopback.moto_command() is None:
        raise DrillError("--store s3 needs the moto server: install it with pip install 'moto[server]'")
    try:
        return loopback.start_moto(workdir=out, log_name="moto.log", die_with_parent=False)
    except LaunchError as exc:
        if exc.exited is not None:
            raise DrillError(f"the moto server exited with {exc.exited} (see {out}/moto.log)") from None
        raise DrillError("the moto server did not answer within 60 s") from None


def create_bucket(moto: loopback.Server, bucket: str) -> None:
    req = urllib.request.Request(f"{moto.url}/{bucket}", method="PUT")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise DrillError(f"creating the drill's bucket failed: HTTP {exc.code}") from None
