"""Fixtures for the API: users with tokens, S3 on moto's server, helpers to upload for real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import seaweedfs as seaweedfs_keys
from tests.support.api import Actor, create_archive, make_actor
from tests.support.fixture_params import fixture_params
from tests.support.seaweedfs import SeaweedS3


@pytest.fixture
def s3_storage(settings: Any, moto_server: str, s3_bucket: str) -> Iterator[str]:
    """Point the service at a fresh bucket on moto's S3 server."""
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = moto_server
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = s3_bucket
    yield s3_bucket


@pytest.fixture
def local_storage(settings: Any, live_server: Any, tmp_path: Path) -> Iterator[str]:
    """The local backend, its storage endpoint served by the live test server."""
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
    settings.PUBLIC_URL = live_server.url
    yield live_server.url


@pytest.fixture
def seaweedfs_storage(settings: Any, seaweedfs: SeaweedS3, seaweedfs_bucket: str) -> Iterator[str]:
    """Point the service at a fresh bucket on SeaweedFS (a real S3: Content-MD5, expiry and
    signatures enforced)."""
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = seaweedfs.endpoint_url
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = seaweedfs_bucket
    settings.DANDIZARR_S3_ACCESS_KEY_ID = seaweedfs_keys.ACCESS_KEY
    settings.DANDIZARR_S3_SECRET_ACCESS_KEY = seaweedfs_keys.SECRET_KEY
    yield seaweedfs_bucket


@pytest.fixture
def owner(db: None) -> Actor:
    return make_actor("owner")


@pytest.fixture
def stranger(db: None) -> Actor:
    return make_actor("stranger")


@pytest.fixture
def admin_actor(db: None) -> Actor:
    return make_actor("boss", staff=True)


@pytest.fixture
def dandiset(owner: Actor) -> str:
    response = owner.client.post("/api/dandisets/", {"name": "test"}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["identifier"])


@pytest.fixture
def zarr_id(owner: Actor, dandiset: str, s3_storage: str) -> str:
    return create_archive(owner, dandiset, "a.zarr", layout="loose")


# An archive on each backend: the local store (served by the live server) and S3 (moto).
BACKENDS = {"local": "local_storage", "s3": "s3_storage"}


@pytest.fixture(params=fixture_params(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    request.getfixturevalue(BACKENDS[request.param])
    yield request.param


@pytest.fixture
def archive(owner: Actor, dandiset: str, backend: str) -> str:
    return create_archive(owner, dandiset, "a.zarr", layout="loose")
