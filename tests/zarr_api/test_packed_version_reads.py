"""A packed file of an archive version is found as the draft's is: by its member row, with no
read of its directory's listing from storage (bench/scale.py found a version's read of a
packed chunk 1.57x the draft's at 1,000,000 files on PostgreSQL: the listing read)."""

from __future__ import annotations

import json
from typing import Any

from dandizarr_server.zarr_api.runtime.tree import StorageChecksumTree
from dandizarr_server.zarr_api.selectors import draft_trees
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, upload
from tests.support.versions import add_asset, publish, read, versions

# A v2 array of 12 chunks of 8 bytes: only an array's chunk files are packed.
ZARRAY = {
    "zarr_format": 2,
    "shape": [96],
    "chunks": [8],
    "dtype": "|u1",
    "compressor": None,
    "filters": None,
    "fill_value": 0,
    "order": "C",
}
FILES = {"a/.zarray": json.dumps(ZARRAY).encode()} | {
    f"a/{i}": f"chunk {i:02d}".encode() for i in range(12)
}


def test_a_versions_packed_file_is_read_without_its_listing(
    owner: Actor, dandiset: str, s3_storage: str, settings: Any
) -> None:
    ensure_storage_versioning()
    zarr_id = create_archive(owner, dandiset, "p.zarr")
    add_asset(owner, dandiset, zarr_id, "p.zarr")
    assert upload(owner.client, zarr_id, FILES).status_code == 200
    settings.DANDIZARR_SHARD_TARGET_BYTES = 40  # a few shards
    assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["shard_count"] > 1
    assert upload(owner.client, zarr_id, {"b/loose": b"not packed"}).status_code == 200
    publish(owner, dandiset)
    (version,) = versions(owner, zarr_id)

    for archive in (zarr_id, version["zarr_id"]):
        if draft_trees._listing_cache is not None:
            draft_trees._listing_cache.clear()  # every listing would come from storage
        reads = StorageChecksumTree.total_reads
        got = read(owner, archive, "a/7", HTTP_RANGE="bytes=6-7")
        assert (got.status_code, got.body) == (206, b"07"), archive
        assert StorageChecksumTree.total_reads == reads, archive
    # A loose file of the version still comes through its listing, and a missing one is 404.
    assert read(owner, version["zarr_id"], "b/loose").body == b"not packed"
    assert read(owner, version["zarr_id"], "a/12").status_code == 404
