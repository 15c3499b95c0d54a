"""A presigned PUT replayed after its batch ended (issue #16, finding 2).

Local backend: the storage endpoint refuses it (403, S3-style XML) and storage stays what the
tree says. S3 (tests/zarr_api/test_reconciliation.py): the URL cannot be revoked, so the batch's
keys are reconciled with storage once the URL has expired.
"""

from __future__ import annotations

import pytest
import requests

from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.audit import archive_audit
from dandizarr_server.zarr_api.services.recovery import unfinished_batch_ends_finish
from tests.support.api import (
    Actor,
    batch_start_urls,
    create_archive,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.sharded import array_files, build_shards
from tests.support.tree_check import assert_tree_matches_storage


@pytest.fixture
def archive(owner: Actor, dandiset: str, local_storage: str) -> str:
    return create_archive(owner, dandiset, "a.zarr", layout="loose")


def assert_refused(response: requests.Response) -> None:
    assert response.status_code == 403, response.text
    assert "<Code>AccessDenied</Code>" in response.text
    assert "no open upload batch expects" in response.text


def test_replays_after_the_batch_ended_are_refused(owner: Actor, archive: str) -> None:
    # Completed, then overwritten by a later batch: the replay would bring the old bytes back.
    old = batch_start_urls(owner, archive, {"over": b"v1", "gone": b"g"})
    assert put(old["over"], b"v1").status_code == 200
    assert put(old["gone"], b"g").status_code == 200
    # Within the open batch, a PUT may be repeated.
    assert put(old["over"], b"v1").status_code == 200
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    assert_refused(put(old["over"], b"v1"))
    assert upload(owner.client, archive, {"over": b"v2"}).status_code == 200
    assert_refused(put(old["over"], b"v1"))

    # Deleted since: the replay would bring it back.
    response = owner.client.delete(f"/api/zarr/{archive}/files/", [{"path": "gone"}], format="json")
    assert response.status_code == 204
    assert_refused(put(old["gone"], b"g"))

    # Cancelled: the file would reappear.
    cancelled = batch_start_urls(owner, archive, {"new": b"n"})
    assert put(cancelled["new"], b"n").status_code == 200
    assert owner.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204
    assert_refused(put(cancelled["new"], b"n"))

    # A URL of an open batch for another md5 than the batch now declares is refused too.
    again = batch_start_urls(owner, archive, {"new": b"other"})
    assert_refused(put(cancelled["new"], b"n"))
    assert put(again["new"], b"other").status_code == 200
    assert owner.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204

    assert storage_listing(archive) == {"over": (2, md5(b"v2"))}
    assert_tree_matches_storage(archive)


def test_a_published_archive_cannot_change_through_a_replay(
    owner: Actor, dandiset: str, archive: str
) -> None:
    urls = batch_start_urls(owner, archive, {"a": b"1"})
    assert put(urls["a"], b"1").status_code == 200
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(assets, {"path": "x.zarr", "zarr_id": archive}, format="json")
    assert response.status_code == 201, response.content
    response = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    assert_refused(put(urls["a"], b"1"))
    assert_tree_matches_storage(archive)


def test_keys_no_batch_uploads_to_are_refused(owner: Actor, archive: str) -> None:
    store = get_store()
    body = b"not a tree"
    for key in (
        f"zarr_checksums/{archive}/.checksum",
        f"zarr/{archive}/never-declared",
        "elsewhere/x",
        "zarr/not-a-uuid/x",
    ):
        (url,) = store.presigned_put_urls([(key, md5(body))], expires_in=60)
        assert_refused(put(url, body))
        assert store.head(key) is None


def test_shards_of_an_ended_pack_batch_are_refused(
    owner: Actor, dandiset: str, local_storage: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    declarations, bodies, _ = build_shards(array_files())
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations[:1]}, format="json"
    )
    assert response.status_code == 200, response.content
    (target,) = response.json()["shards"]
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert_refused(put(target["upload_url"], bodies[target["name"]]))
    assert list(get_store().list(f"zarr_shards/{zarr_id}/")) == []


def test_an_unfinished_deletion_holds_publishing_until_it_is_finished(
    owner: Actor, dandiset: str, archive: str
) -> None:
    """The state a crash after the deletion's intent committed leaves (tests of the real
    crash: test_crash_recovery.py): the archive may not be published until the deletion is
    finished; the next request that changes the archive (an upload, an audit) finishes it
    first and goes ahead, and the sweep finishes it when no request comes."""
    assert upload(owner.client, archive, {"a": b"1", "b": b"2"}).status_code == 200
    deletion = Batch.objects.create(
        archive=ZarrArchive.objects.get(zarr_id=archive),
        kind=Batch.Kind.DELETE,
        state=Batch.State.DELETING,
    )
    BatchFile.objects.create(batch=deletion, path="a")
    assert owner.client.get(f"/api/zarr/{archive}/").json()["checksum_status"] == "pending"
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(assets, {"path": "x.zarr", "zarr_id": archive}, format="json")
    assert response.status_code == 201, response.content
    publish = f"/api/dandisets/{dandiset}/versions/draft/publish/"
    assert owner.client.post(publish).status_code == 409

    assert upload(owner.client, archive, {"c": b"3"}).status_code == 200
    assert unfinished_batch_ends_finish() == 0  # the upload's start finished it
    assert storage_listing(archive) == {"b": (1, md5(b"2")), "c": (1, md5(b"3"))}
    assert_tree_matches_storage(archive)
    archive_audit(ZarrArchive.objects.get(zarr_id=archive))
    assert owner.client.post(publish).status_code == 201
