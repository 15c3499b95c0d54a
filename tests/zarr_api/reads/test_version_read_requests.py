"""What a read of a version's file asks storage (S3, moto): one request, whether the draft still
holds the file (its current object, on condition that its ETag is the file's md5) or replaced
it (the object version found once, then read by its id), loose or packed; never a listing of
the key's versions per read, and never the draft's new bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, upload
from tests.support.storage_requests import record_s3_requests
from tests.support.versions import add_asset, publish, versions

FILES = {"a/x": b"x one", "a/y": b"y one", "b": b"b one"}
# A v2 array of 4 chunks (only an array's chunk files are packed).
ZARRAY = {
    "zarr_format": 2,
    "shape": [32],
    "chunks": [8],
    "dtype": "|u1",
    "compressor": None,
    "filters": None,
    "fill_value": 0,
    "order": "C",
}
ARRAY = {"a/.zarray": json.dumps(ZARRAY).encode()} | {
    f"a/{i}": f"chunk {i:02d}".encode() for i in range(4)
}


@pytest.fixture
def storage_requests(s3_storage: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request the store sends to S3 from now on: method, path and query, Range."""
    store = get_store()
    assert isinstance(store, S3ObjectStore)
    return record_s3_requests(store, monkeypatch)


def _version_of(owner: Actor, dandiset: str, zarr_id: str) -> str:
    publish(owner, dandiset)
    return str(versions(owner, zarr_id)[-1]["zarr_id"])


def _read_counted(requests: list[str], read_id: str, path: str) -> tuple[bytes, list[str]]:
    requests.clear()
    response = APIClient().get(f"/zarr/{read_id}/{path}")
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content), list(requests)


def test_a_versions_loose_read_is_one_storage_request_before_and_after_the_draft_replaces_it(
    owner: Actor, dandiset: str, storage_requests: list[str]
) -> None:
    ensure_storage_versioning()
    zarr_id = create_archive(owner, dandiset, "r.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "r.zarr")
    assert upload(owner.client, zarr_id, FILES).status_code == 200
    version_id = _version_of(owner, dandiset, zarr_id)

    # The draft holds the version's bytes: the current object, on condition, in one request.
    for path, body in FILES.items():
        for _ in range(2):
            read_body, sent = _read_counted(storage_requests, version_id, path)
            assert read_body == body
            assert len(sent) == 1 and sent[0].startswith("GET "), sent
            assert "versions" not in sent[0], sent

    # The draft replaces a/x: the version's read finds its object version once, then reads
    # it by id, one request each time; the draft's read gets the new bytes.
    assert upload(owner.client, zarr_id, {"a/x": b"x two"}).status_code == 200
    first, sent = _read_counted(storage_requests, version_id, "a/x")
    assert first == b"x one"
    assert any("versions" in s for s in sent), sent
    for _ in range(3):
        again, sent = _read_counted(storage_requests, version_id, "a/x")
        assert again == b"x one"
        assert len(sent) == 1 and "versionId=" in sent[0], sent
    assert _read_counted(storage_requests, zarr_id, "a/x")[0] == b"x two"
    # A version published after the change reads the new bytes, the first the old.
    newer = _version_of(owner, dandiset, zarr_id)
    assert _read_counted(storage_requests, newer, "a/x")[0] == b"x two"
    assert _read_counted(storage_requests, version_id, "a/x")[0] == b"x one"


def test_a_versions_packed_read_is_one_storage_request(
    owner: Actor, dandiset: str, storage_requests: list[str], settings: Any
) -> None:
    ensure_storage_versioning()
    zarr_id = create_archive(owner, dandiset, "p.zarr")
    add_asset(owner, dandiset, zarr_id, "p.zarr")
    assert upload(owner.client, zarr_id, ARRAY).status_code == 200
    settings.DANDIZARR_SHARD_TARGET_BYTES = 20  # a few shards
    assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
    version_id = _version_of(owner, dandiset, zarr_id)
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/a/1").json()["shard"] is not None
    chunks = {p: b for p, b in ARRAY.items() if not p.endswith(".zarray")}
    for path, body in chunks.items():
        for _ in range(2):
            read_body, sent = _read_counted(storage_requests, version_id, path)
            assert read_body == body
            assert len(sent) == 1 and "zarr_shards/" in sent[0], sent

    # The draft replaces a packed file: the version reads the shard's range (found once).
    assert upload(owner.client, zarr_id, {"a/1": b"loose now"}).status_code == 200
    assert _read_counted(storage_requests, version_id, "a/1")[0] == chunks["a/1"]
    for _ in range(3):
        read_body, sent = _read_counted(storage_requests, version_id, "a/1")
        assert read_body == chunks["a/1"]
        assert len(sent) == 1 and "zarr_shards/" in sent[0], sent
    assert _read_counted(storage_requests, zarr_id, "a/1")[0] == b"loose now"
