"""The multipart contract, for stores that take multipart uploads (``takes_multipart``)."""

from __future__ import annotations

import os

import pytest
import requests

from dandizarr.objectstore.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
)
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import MIN_PART, composite_etag, part_ranges
from dandizarr.testing.store_contract.support import (
    ContractBase,
    md5,
)


class MultipartContract(ContractBase):
    """Multipart uploads, for stores that take them (``takes_multipart``: S3, memory)."""

    def upload_part(
        self, store: ObjectStore, key: str, upload_id: str, number: int, data: bytes
    ) -> None:
        """PUT part ``number`` of a multipart upload as a client does: to its presigned URL."""
        [url] = store.presigned_part_urls(
            key, upload_id, [md5(data)], expires_in=600, first_part=number
        )
        response = requests.put(
            url, data=data, headers={"Content-MD5": content_md5_header(md5(data))}, timeout=60
        )
        assert response.status_code == 200, response.text

    @pytest.fixture
    def multipart(self, store: ObjectStore) -> ObjectStore:
        assert store.takes_multipart
        return store

    def upload_parts(
        self, store: ObjectStore, key: str, upload_id: str, data: bytes, size: int
    ) -> list[str]:
        ranges = part_ranges(len(data), size)
        for number, (a, b) in enumerate(ranges, start=1):
            self.upload_part(store, key, upload_id, number, data[a:b])
        return [md5(data[a:b]) for a, b in ranges]

    def test_multipart_parts_complete_into_the_composite_etag(self, multipart: ObjectStore) -> None:
        store, key = multipart, "zarr/a/big"
        data = os.urandom(2 * MIN_PART + 1234)
        upload_id = store.create_multipart_upload(key)
        assert store.head(key) is None  # nothing visible before completion
        md5s = self.upload_parts(store, key, upload_id, data, MIN_PART)
        parts = store.list_parts(key, upload_id)
        assert [(p.number, p.etag, p.size) for p in parts] == [
            (1, md5s[0], MIN_PART),
            (2, md5s[1], MIN_PART),
            (3, md5s[2], 1234),
        ]
        assert [u.upload_id for u in store.list_multipart_uploads("zarr/a/")] == [upload_id]
        assert list(store.list_multipart_uploads("zarr/b/")) == []
        etag = store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])
        assert etag == composite_etag(md5s)
        assert store.head(key) == ObjectInfo(key, len(data), etag)
        assert store.get(key) == data
        assert store.get_range(key, MIN_PART - 2, MIN_PART + 2) == data[MIN_PART - 2 : MIN_PART + 2]
        assert list(store.list_multipart_uploads("zarr/a/")) == []
        with pytest.raises(ObjectNotFound):
            store.list_parts(key, upload_id)

    def test_multipart_abort_drops_the_parts(self, multipart: ObjectStore) -> None:
        store, key = multipart, "zarr/a/aborted"
        upload_id = store.create_multipart_upload(key)
        self.upload_parts(store, key, upload_id, os.urandom(1000), 600)
        store.abort_multipart_upload(key, upload_id)
        store.abort_multipart_upload(key, upload_id)  # gone already: fine
        with pytest.raises(ObjectNotFound):
            store.list_parts(key, upload_id)
        assert list(store.list_multipart_uploads("zarr/a/")) == []
        assert store.head(key) is None

    def test_multipart_parts_below_the_minimum_are_refused(self, multipart: ObjectStore) -> None:
        """Why tests use 5 MiB parts: every store refuses smaller ones, as S3 does."""
        store, key = multipart, "zarr/a/small"
        upload_id = store.create_multipart_upload(key)
        self.upload_parts(store, key, upload_id, os.urandom(3000), 1000)
        parts = store.list_parts(key, upload_id)
        with pytest.raises(ObjectStoreError, match="EntityTooSmall"):
            store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])
        assert store.head(key) is None
