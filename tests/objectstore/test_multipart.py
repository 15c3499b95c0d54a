"""Multipart uploads through presigned part URLs (dandizarr.objectstore.multipart), on moto and
on SeaweedFS: S3's 5 MiB minimum part holds on both, and the composite ETag is S3's."""

from __future__ import annotations

import hashlib
import os

import pytest
import requests

from dandizarr.objectstore import ObjectNotFound, ObjectStore, ObjectStoreError
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import (
    MAX_OBJECT,
    MAX_PARTS,
    MIB,
    MIN_PART,
    composite_etag,
    part_count,
    part_ranges,
    part_size,
)


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _put_parts(
    store: ObjectStore, key: str, upload_id: str, data: bytes, size: int, *, page: int = MAX_PARTS
) -> list[str]:
    """PUT every part, its URLs signed ``page`` parts at a time (as the service hands them out:
    docs/api.md, "Big files")."""
    ranges = part_ranges(len(data), size)
    md5s = [_md5(data[a:b]) for a, b in ranges]
    urls = [
        url
        for first in range(0, len(md5s), page)
        for url in store.presigned_part_urls(
            key, upload_id, md5s[first : first + page], expires_in=600, first_part=first + 1
        )
    ]
    for (a, b), md5, url in zip(ranges, md5s, urls, strict=True):
        response = requests.put(
            url, data=data[a:b], headers={"Content-MD5": content_md5_header(md5)}
        )
        assert response.status_code == 200, response.text
    return md5s


def test_part_size_keeps_within_s3_limits() -> None:
    assert part_size(0) == MIN_PART
    assert part_size(10 * MIB, 8 * MIB) == 8 * MIB
    assert part_size(10 * MIB, 1) == MIN_PART  # never below S3's minimum
    largest = part_size(MAX_OBJECT)
    assert part_count(MAX_OBJECT, largest) <= MAX_PARTS
    assert largest % MIB == 0
    for size in (MAX_PARTS * MIN_PART, MAX_PARTS * MIN_PART + 1, 123 * (1 << 30)):
        assert part_count(size, part_size(size)) <= MAX_PARTS
    with pytest.raises(ValueError):
        part_size(MAX_OBJECT + 1)


def check_parts_complete_into_the_composite_etag(multipart_store: ObjectStore) -> None:
    store, key = multipart_store, "zarr/a/big"
    data = os.urandom(2 * MIN_PART + 1234)
    upload_id = store.create_multipart_upload(key)
    assert store.head(key) is None  # nothing visible before completion
    md5s = _put_parts(store, key, upload_id, data, MIN_PART, page=2)  # parts 1-2, then 3
    parts = store.list_parts(key, upload_id)
    assert [(p.number, p.etag, p.size) for p in parts] == [
        (1, md5s[0], MIN_PART),
        (2, md5s[1], MIN_PART),
        (3, md5s[2], 1234),
    ]
    assert [u.upload_id for u in store.list_multipart_uploads("zarr/a/")] == [upload_id]
    etag = store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])
    assert etag == composite_etag(md5s)
    info = store.head(key)
    assert info is not None and (info.size, info.etag) == (len(data), etag)
    assert store.get(key) == data
    assert list(store.list_multipart_uploads("zarr/a/")) == []
    with pytest.raises(ObjectNotFound):
        store.list_parts(key, upload_id)


def check_abort_drops_the_parts(multipart_store: ObjectStore) -> None:
    store, key = multipart_store, "zarr/a/aborted"
    upload_id = store.create_multipart_upload(key)
    _put_parts(store, key, upload_id, os.urandom(MIN_PART + 1), MIN_PART)
    store.abort_multipart_upload(key, upload_id)
    store.abort_multipart_upload(key, upload_id)  # gone already: fine
    with pytest.raises(ObjectNotFound):
        store.list_parts(key, upload_id)
    assert list(store.list_multipart_uploads("zarr/a/")) == []
    assert store.head(key) is None


def check_parts_below_the_minimum_are_refused(multipart_store: ObjectStore) -> None:
    """Why tests use 5 MiB parts: moto and SeaweedFS refuse smaller ones, as S3 does."""
    store, key = multipart_store, "zarr/a/small"
    upload_id = store.create_multipart_upload(key)
    _put_parts(store, key, upload_id, os.urandom(300_000), 100_000)
    parts = store.list_parts(key, upload_id)
    with pytest.raises(ObjectStoreError, match="EntityTooSmall"):
        store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])


def test_seaweedfs_refuses_a_part_of_other_bytes(seaweedfs_store: ObjectStore) -> None:
    """The part's md5 is bound into its URL's signature (moto does not check it: the service
    checks the parts storage lists against the declared md5s)."""
    store, key = seaweedfs_store, "zarr/a/bad"
    upload_id = store.create_multipart_upload(key)
    [url] = store.presigned_part_urls(key, upload_id, [_md5(b"good")], expires_in=600)
    response = requests.put(
        url, data=b"evil", headers={"Content-MD5": content_md5_header(_md5(b"good"))}
    )
    assert response.status_code == 400 and "BadDigest" in response.text


def test_parts_complete_into_the_composite_etag_on_moto(s3_store: ObjectStore) -> None:
    check_parts_complete_into_the_composite_etag(s3_store)


def test_parts_complete_into_the_composite_etag_on_seaweedfs(seaweedfs_store: ObjectStore) -> None:
    check_parts_complete_into_the_composite_etag(seaweedfs_store)


def test_abort_drops_the_parts_on_moto(s3_store: ObjectStore) -> None:
    check_abort_drops_the_parts(s3_store)


def test_abort_drops_the_parts_on_seaweedfs(seaweedfs_store: ObjectStore) -> None:
    check_abort_drops_the_parts(seaweedfs_store)


def test_parts_below_the_minimum_are_refused_on_moto(s3_store: ObjectStore) -> None:
    check_parts_below_the_minimum_are_refused(s3_store)


def test_parts_below_the_minimum_are_refused_on_seaweedfs(seaweedfs_store: ObjectStore) -> None:
    check_parts_below_the_minimum_are_refused(seaweedfs_store)
