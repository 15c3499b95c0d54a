"""Shared fixtures: real PostgreSQL (via pytest-django), S3 through moto's server over HTTP."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import boto3
import pytest
from django.test.testcases import LiveServerThread
from moto.server import ThreadedMotoServer

from dandizarr_server.httpserver import NoDelayThreadedWSGIServer
from tests.support.seaweedfs import SeaweedS3

# Credentials for moto only; set before any boto3 client exists.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

# The live test service answers like ``dandizarr serve`` (no 40 ms Nagle stall per reply).
LiveServerThread.server_class = NoDelayThreadedWSGIServer


# Tests using these fixtures talk to a server over real HTTP; they are marked ``live``.
LIVE_FIXTURES = frozenset({"live_server", "seaweedfs"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark as ``live`` every test that starts a server or process: by its fixtures, or by its
    module's name (``*_live.py``) or ``pytestmark``, so ``-m "not live"`` is a fast inner loop."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & LIVE_FIXTURES or item.path.name.endswith("_live.py"):
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """One test database per pytest process, so concurrent runs on one server don't collide."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise pytest.UsageError(
            "the test suite runs against PostgreSQL: set DATABASE_URL (make test does this)"
        )
    database.setdefault("TEST", {})
    database["TEST"]["NAME"] = f"test_dandizarr_{os.getpid()}"


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3 in server mode on a free port; yields its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(moto_server: str) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    client = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A real S3 server (SeaweedFS) on free ports, for the whole session."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def seaweedfs_bucket(seaweedfs: SeaweedS3) -> str:
    """A fresh, empty bucket on the SeaweedFS server."""
    return seaweedfs.create_bucket(f"test-{uuid.uuid4().hex[:16]}")


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Each test starts with an empty Django cache: the expensive reads' rate counts
    (dandizarr_server.zarr_api.throttles) and cached previews of one test never reach the next."""
    from django.core.cache import cache

    cache.clear()
    yield
