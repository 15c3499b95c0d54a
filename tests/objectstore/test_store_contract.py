"""The object-store contract (dandizarr.testing.store_contract) on every backend: in memory,
a local directory (constructed directly: no Django, no database), S3 on moto and on SeaweedFS.

The local backend's presigned URLs are answered by the web app's storage view: their contract
runs in test_store.py, with the live server."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from dandizarr.objectstore import ObjectStore
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.memory import MemoryObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.testing.store_contract import (
    MultipartContract,
    PresignedURLContract,
    StoreContract,
)
from tests.support.moto_objects import put_objects


class TestMemoryStore(StoreContract, MultipartContract):
    @pytest.fixture
    def store(self) -> MemoryObjectStore:
        return MemoryObjectStore()

    def upload_part(
        self, store: ObjectStore, key: str, upload_id: str, number: int, data: bytes
    ) -> None:
        assert isinstance(store, MemoryObjectStore)
        store.upload_part(key, upload_id, number, data)


class TestLocalStore(StoreContract):
    # The local backend keeps a replaced file, and lists no delete marker.
    writes_delete_markers = False

    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalObjectStore:
        # Its URLs would point at a web app none of these tests asks.
        return LocalObjectStore(
            tmp_path / "storage", public_url="http://storage.invalid", secret_key="k", fsync=False
        )


class TestMotoStore(StoreContract, MultipartContract, PresignedURLContract):
    # moto answers a GET with response-header overrides (dandizarr.objectstore.user_bytes) of a
    # missing key 403.
    missing_get_status = 403

    @pytest.fixture
    def store(self, s3_store: S3ObjectStore, moto_server: str) -> S3ObjectStore:
        self.moto_server = moto_server
        return s3_store

    def put_bulk(self, store: ObjectStore, items: Mapping[str, bytes]) -> None:
        put_objects(store, items, self.moto_server)


class TestSeaweedFSStore(StoreContract, MultipartContract, PresignedURLContract):
    # SeaweedFS lists directory by directory ("p/a/b" before "p/a-b").
    lists_in_byte_order = False

    @pytest.fixture
    def store(self, seaweedfs_store: S3ObjectStore) -> S3ObjectStore:
        return seaweedfs_store
