"""Session fixtures: real object-storage servers on loopback (see tests/servers.py)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spoteval import standin
from tests import servers
from tests.fake_metadata import AgentProcess, cleanup_tagged


@pytest.fixture(autouse=True)
def _each_test_in_the_folder_it_began_in() -> Iterator[None]:
    """A shard run in this process enters its task's folder (spoteval/harness/locate.py: `enter`), as
    a node's shard process does; the next test starts where the suite started."""
    here = os.getcwd()
    yield
    os.chdir(here)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[servers.Server]:
    server = servers.start_moto()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[servers.Server]:
    server = servers.start_azurite()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class StoreTarget:
    """A store URL plus the options that reach it (a fresh bucket/container per test)."""

    kind: str
    url: str
    options: dict[str, Any]


def _name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_target(moto_server: servers.Server) -> StoreTarget:
    bucket = _name()
    servers.create_s3_bucket(moto_server, bucket)
    return StoreTarget("s3", f"s3://{bucket}/evals", servers.s3_store_options(moto_server))


@pytest.fixture
def azure_target(azurite_server: servers.Server) -> StoreTarget:
    container = _name()
    servers.create_azure_container(azurite_server, container)
    return StoreTarget("az", f"az://{container}/evals", servers.azure_store_options(azurite_server))


@pytest.fixture
def file_target(tmp_path: Path) -> StoreTarget:
    return StoreTarget("file", f"file://{tmp_path}/store", {})


@pytest.fixture(params=["file", "s3", "az"])
def any_target(request: pytest.FixtureRequest) -> StoreTarget:
    """Each store kind in turn, each against its real server.

    gs:// is not among them: obstore's GCS client speaks the XML API, which the GCS emulator
    available here does not implement (no object listing, no HEAD, no ETag headers).
    """
    name = {"file": "file_target", "s3": "s3_target", "az": "azure_target"}[request.param]
    target: StoreTarget = request.getfixturevalue(name)
    return target


@pytest.fixture(params=["s3", "az"])
def s3_or_azure_target(request: pytest.FixtureRequest) -> StoreTarget:
    """Each of the stores with conditional writes a pool's claims need, against its real server."""
    name = {"s3": "s3_target", "az": "azure_target"}[request.param]
    target: StoreTarget = request.getfixturevalue(name)
    return target


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    """The agent processes a test starts (it appends each); at its end each is ended with all it
    started (tests/fake_metadata.py: `cleanup_tagged`)."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        cleanup_tagged(agent)


@pytest.fixture
def standin_server() -> Iterator[standin.StandinServer]:
    """The stand-in model server on a free loopback port, serving until the test ends."""
    server = standin.serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
