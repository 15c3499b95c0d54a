"""Multipart uploads (dandizarr.objectstore.multipart): the part size rule, and a part URL's
signed md5 on SeaweedFS. Parts, completion and abort are the contract's
(dandizarr.testing.store_contract.MultipartContract, on every store that takes them)."""

from __future__ import annotations

import hashlib

import pytest
import requests

from dandizarr.objectstore import ObjectStore
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import (
    MAX_OBJECT,
    MAX_PARTS,
    MIB,
    MIN_PART,
    part_count,
    part_size,
)


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


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
