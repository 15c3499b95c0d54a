"""The upload flow on SeaweedFS: a real S3 server that enforces Content-MD5, URL expiry and
signatures (moto does not), and lists keys directory by directory instead of in byte order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from dandizarr.objectstore import ListingOrderError, sigv4
from dandizarr.objectstore.digests import content_md5_header
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.audit import archive_audit
from tests.support.api import (
    SAMPLE_FILES,
    Actor,
    batch_start_urls,
    create_archive,
    expected_checksum,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.sharded import array_files, read_file, upload_sharded
from tests.support.tree_check import assert_tree_matches_storage

# Byte order: "p/a-b" < "p/a/b" < "p/a/c/d" < "p/a0"; SeaweedFS lists "p/a/..." first.
ORDER_TRAPS = {"p/a-b": b"dash", "p/a/b": b"slash", "p/a/c/d": b"deeper", "p/a0": b"zero"}


@pytest.fixture
def zarr_id(owner: Actor, dandiset: str, seaweedfs_storage: str) -> str:
    return create_archive(owner, dandiset, "sw.zarr", layout="loose")


def assert_listing_is_out_of_byte_order(zarr_id: str) -> None:
    """SeaweedFS really does list this archive out of byte order (the audit's fallback ran)."""
    with pytest.raises(ListingOrderError):
        list(get_store().list_ordered(f"zarr/{zarr_id}/"))


def test_upload_browse_and_audit_keys_seaweedfs_lists_out_of_order(
    owner: Actor, zarr_id: str
) -> None:
    files = {**SAMPLE_FILES, **ORDER_TRAPS}
    response = upload(owner.client, zarr_id, files)
    assert response.status_code == 200, response.content
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["checksum"], archive["checksum_status"]) == (
        expected_checksum(files),
        "complete",
    )
    assert_tree_matches_storage(zarr_id)
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/p/a/b").json()
    assert requests.get(entry["download_url"], timeout=10).content == b"slash"
    assert_listing_is_out_of_byte_order(zarr_id)
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert not report.drift, report
    # Drift behind the tree's back is found and repaired through the sorted listing too.
    prefix = f"zarr/{zarr_id}/"
    get_store().delete(prefix + "p/a/b")
    get_store().put(prefix + "p/a-c", b"added")
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert report.drift and set(report.directories_rewritten) == {"", "p", "p/a"}
    assert_tree_matches_storage(zarr_id)
    assert not archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id)).drift


def test_cancel_and_delete(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"keep": b"old", "p/a-b": b"x"}).status_code == 200
    urls = batch_start_urls(owner, zarr_id, {"keep": b"new", "p/a/b": b"y", "p/a0": b"z"})
    for path, body in [("keep", b"new"), ("p/a/b", b"y")]:
        assert put(urls[path], body).status_code == 200
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    # The overwritten "keep" left the archive with the batch; nothing else of it remains.
    assert sorted(storage_listing(zarr_id)) == ["p/a-b"]
    assert_tree_matches_storage(zarr_id)
    assert upload(owner.client, zarr_id, ORDER_TRAPS).status_code == 200
    url = f"/api/zarr/{zarr_id}/files/"
    response = owner.client.delete(url, [{"path": "p/a/b"}, {"path": "p/a0"}], format="json")
    assert response.status_code == 204
    assert sorted(storage_listing(zarr_id)) == ["p/a-b", "p/a/c/d"]
    assert_tree_matches_storage(zarr_id)


def test_storage_itself_refuses_a_corrupt_body(owner: Actor, zarr_id: str) -> None:
    urls = batch_start_urls(owner, zarr_id, {"f": b"the declared body"})
    # The declared md5 in Content-MD5, another body: S3 answers BadDigest, stores nothing.
    response = requests.put(
        urls["f"],
        data=b"a corrupted body!",
        headers={"Content-MD5": content_md5_header(md5(b"the declared body"))},
        timeout=30,
    )
    assert response.status_code == 400 and b"BadDigest" in response.content, response.content
    complete = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert complete.status_code == 400 and complete.json()["missing"] == ["f"]
    assert put(urls["f"], b"the declared body").status_code == 200
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200


def test_a_put_without_the_signed_content_md5_is_refused(owner: Actor, zarr_id: str) -> None:
    urls = batch_start_urls(owner, zarr_id, {"f": b"body"})
    response = requests.put(urls["f"], data=b"body", timeout=30)
    assert response.status_code == 403, response.content
    assert get_store().head(f"zarr/{zarr_id}/f") is None


def test_expired_urls_are_refused(
    owner: Actor, zarr_id: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert upload(owner.client, zarr_id, {"old": b"stored"}).status_code == 200
    settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS = 1
    # Signed 5 s ago for 1 s: expired when issued (SeaweedFS checks), no wait.
    past = datetime.now(UTC) - timedelta(seconds=5)
    monkeypatch.setattr(sigv4, "signing_clock", lambda: past)
    urls = batch_start_urls(owner, zarr_id, {"f": b"late"})
    download = owner.client.get(f"/api/zarr/{zarr_id}/files/old").json()["download_url"]
    assert put(urls["f"], b"late").status_code == 403
    assert requests.get(download, timeout=10).status_code == 403
    assert get_store().head(f"zarr/{zarr_id}/f") is None


def test_sharded_archive_with_loose_files_out_of_byte_order_audits_clean(
    owner: Actor, dandiset: str, seaweedfs_storage: str
) -> None:
    """The audit merges the loose listing with the packed members: on SeaweedFS the listing
    puts "arr/..." before "arr-x" and "arr.txt", which sort before it."""
    files = {**array_files(), "arr-x": b"dash", "arr.txt": b"dot"}
    zarr_id = upload_sharded(owner, dandiset, files)
    assert read_file(owner, zarr_id, "arr/3.4") == files["arr/3.4"]
    assert read_file(owner, zarr_id, "arr-x") == b"dash"
    assert_listing_is_out_of_byte_order(zarr_id)
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == expected_checksum(files)
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert not report.drift, report
    assert_tree_matches_storage(zarr_id)
    # The recursive listing with ``urls``: every file readable from its entry alone.
    page = owner.client.get(f"/api/zarr/{zarr_id}/files/?recursive=true&urls=true").json()
    assert [r["path"] for r in page["results"]] == sorted(files)
    for entry in page["results"]:
        shard = entry["shard"]
        headers = {}
        if shard is not None:
            headers["Range"] = f"bytes={shard['offset']}-{shard['offset'] + shard['length'] - 1}"
        response = requests.get(entry["download_url"], headers=headers, timeout=10)
        assert response.status_code == (206 if shard else 200)
        assert response.content == files[entry["path"]]
    assert sum(r["shard"] is not None for r in page["results"]) == 100
