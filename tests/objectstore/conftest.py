"""The backends' fixtures: the local store the web app builds from the settings, with its
presigned URLs answered by a real Django server (``live_server``); S3 stores on moto and on
SeaweedFS. The contract every backend keeps runs in test_store_contract.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import LazySettings

from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support import seaweedfs as seaweedfs_credentials
from tests.support.fixture_params import fixture_params
from tests.support.seaweedfs import SeaweedS3


@pytest.fixture
def local_store(
    live_server: Any, transactional_db: None, tmp_path: Path, settings: LazySettings
) -> Iterator[LocalObjectStore]:
    """The store of the storage endpoint, which checks PUTs against open batches in the test
    database (rows it must see: transactional_db)."""
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
    settings.PUBLIC_URL = live_server.url
    # The very store the storage view uses (the settings change reset the cached one).
    store = get_store()
    assert isinstance(store, LocalObjectStore)
    assert store.root == (tmp_path / "storage").resolve()
    yield store


@pytest.fixture
def s3_store(moto_server: str, s3_bucket: str) -> S3ObjectStore:
    return S3ObjectStore(
        s3_bucket,
        endpoint_url=moto_server,
        access_key_id="testing",
        secret_access_key="testing",
    )


@pytest.fixture
def seaweedfs_store(seaweedfs: SeaweedS3, seaweedfs_bucket: str) -> S3ObjectStore:
    return S3ObjectStore(
        seaweedfs_bucket,
        endpoint_url=seaweedfs.endpoint_url,
        access_key_id=seaweedfs_credentials.ACCESS_KEY,
        secret_access_key=seaweedfs_credentials.SECRET_KEY,
    )


REMOTE_STORES = {"s3_store": "s3_store", "seaweedfs_store": "seaweedfs_store"}


@pytest.fixture(params=fixture_params(REMOTE_STORES))
def remote_store(request: pytest.FixtureRequest) -> S3ObjectStore:
    """An S3 store on moto's server, then on SeaweedFS."""
    store: S3ObjectStore = request.getfixturevalue(REMOTE_STORES[request.param])
    return store
