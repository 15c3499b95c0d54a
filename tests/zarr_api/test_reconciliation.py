"""On S3 a presigned PUT cannot be revoked (issue #16, finding 2): a URL replayed after its
batch ended does change storage, so it must not go unnoticed. SeaweedFS, a real S3 server that
enforces URL expiry: once the URLs have expired, the sweep reconciles every ended batch's keys
with storage, repairs the tree to what storage holds and records the drift on the archive.
Publishing waits for that (409 naming when) while URLs issued before storage kept object
versions may be replayed; once storage keeps them, a replay can replace no byte a version
reads, and a version published before the repair stays what its tree was.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from dandizarr_server.zarr_api.models import Batch
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from dandizarr_server.zarr_api.services.reconciliation import batch_reconcile, due_batches_reconcile
from tests.support.api import (
    Actor,
    age_upload_urls,
    batch_start_urls,
    create_archive,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.tree_check import assert_tree_matches_storage
from tests.support.versions import add_asset, publish, state_of, versions

EXPIRY = 6
MARGIN = 1


@pytest.fixture
def seaweed_storage(settings: Any, seaweedfs_storage: str) -> Iterator[str]:
    """SeaweedFS with upload URLs short-lived enough to wait for."""
    settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS = EXPIRY
    settings.DANDIZARR_RECONCILE_MARGIN_SECONDS = MARGIN
    yield seaweedfs_storage


@pytest.fixture
def archive(owner: Actor, dandiset: str, seaweed_storage: str) -> str:
    return create_archive(owner, dandiset, "a.zarr", layout="loose")


def test_replays_are_found_once_the_urls_expire_and_publish_waits(
    owner: Actor, dandiset: str, archive: str
) -> None:
    first = batch_start_urls(owner, archive, {"over": b"v1", "gone": b"g"})
    assert put(first["over"], b"v1").status_code == 200
    assert put(first["gone"], b"g").status_code == 200
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    assert upload(owner.client, archive, {"over": b"v2"}).status_code == 200
    response = owner.client.delete(f"/api/zarr/{archive}/files/", [{"path": "gone"}], format="json")
    assert response.status_code == 204
    cancelled = batch_start_urls(owner, archive, {"new": b"n"})
    assert owner.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204
    assert_tree_matches_storage(archive)

    # S3 cannot refuse them: old bytes come back, a deleted file reappears, a cancelled one too.
    assert put(first["over"], b"v1").status_code == 200
    assert put(first["gone"], b"g").status_code == 200
    assert put(cancelled["new"], b"n").status_code == 200
    ended = Batch.objects.filter(archive__zarr_id=archive, reconcile_after__isnull=False)
    assert ended.count() == 4  # two uploads, the deletion, the cancel
    # The reconciliation scheduled at each batch end waits for the URLs to expire.
    assert not any(batch_reconcile(b.pk) for b in ended)
    detail = owner.client.get(f"/api/zarr/{archive}/").json()
    assert detail["drift_count"] == 0
    valid_until = datetime.fromisoformat(detail["upload_urls_valid_until"])

    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(assets, {"path": "x.zarr", "zarr_id": archive}, format="json")
    assert response.status_code == 201, response.content
    response = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409, response.content
    possible_after = datetime.fromisoformat(response.json()["publish_possible_after"])
    assert possible_after > valid_until
    assert "upload URLs" in response.json()["detail"]

    time.sleep(max(0.0, (valid_until - datetime.now(valid_until.tzinfo)).total_seconds()) + 0.5)
    # Expired: SeaweedFS refuses the URL now.
    assert put(first["over"], b"v1").status_code == 403
    age_upload_urls()  # and the reconciliation margin passed
    # The periodic sweep (a lost task's batches too).
    assert due_batches_reconcile() == 4
    assert not ended.all().exists()

    # Storage is the truth: the tree now says what a download gives.
    assert storage_listing(archive) == {
        "over": (2, md5(b"v1")),
        "gone": (1, md5(b"g")),
        "new": (1, md5(b"n")),
    }
    assert_tree_matches_storage(archive)
    detail = owner.client.get(f"/api/zarr/{archive}/").json()
    assert detail["drift_count"] == 3
    assert detail["last_drift_at"] is not None
    assert "new: storage holds" in detail["last_drift"]  # the latest batch with drift

    response = owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    assert_tree_matches_storage(archive)
    (version,) = versions(owner, archive)
    assert state_of(owner, version["zarr_id"]) == {"over": b"v1", "gone": b"g", "new": b"n"}


def test_once_storage_keeps_versions_a_replay_never_changes_a_version(
    owner: Actor, dandiset: str, archive: str
) -> None:
    ensure_storage_versioning()  # as ensure_bucket does at deployment
    assert upload(owner.client, archive, {"over": b"v1"}).status_code == 200
    second = batch_start_urls(owner, archive, {"over": b"v2"})
    assert put(second["over"], b"v2").status_code == 200
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    add_asset(owner, dandiset, archive, "x.zarr")
    # No wait: the URLs are valid, but whatever they replace, storage keeps.
    publish(owner, dandiset)
    (version,) = versions(owner, archive)
    assert state_of(owner, version["zarr_id"]) == {"over": b"v2"}
    first = batch_start_urls(owner, archive, {"over": b"v3"})
    assert owner.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204
    # Replays of both batches' URLs: the draft's object changes behind its tree.
    assert put(first["over"], b"v3").status_code == 200
    assert put(second["over"], b"v2").status_code == 200
    assert put(first["over"], b"v3").status_code == 200
    assert state_of(owner, version["zarr_id"]) == {"over": b"v2"}
    age_upload_urls()  # the URLs' lifetime and the margin passed: nothing can replay now
    assert due_batches_reconcile() >= 1
    # The repair changed the draft to what storage holds; the version is what it was.
    assert state_of(owner, archive) == {"over": b"v3"}
    assert state_of(owner, version["zarr_id"]) == {"over": b"v2"}


def test_a_batch_is_not_reconciled_while_the_archive_has_work_in_flight(
    owner: Actor, archive: str, settings: Any
) -> None:
    settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS = 1
    settings.DANDIZARR_RECONCILE_MARGIN_SECONDS = 0
    first = batch_start_urls(owner, archive, {"a": b"1"})
    assert put(first["a"], b"1").status_code == 200
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    age_upload_urls()  # the first batch's URLs expired: it is due
    # A new batch writes "a" legitimately: not drift, and checked when it completes.
    second = batch_start_urls(owner, archive, {"a": b"2"})
    assert put(second["a"], b"2").status_code == 200
    (ended,) = Batch.objects.filter(archive__zarr_id=archive, reconcile_after__isnull=False)
    assert batch_reconcile(ended.pk) is True
    assert owner.client.get(f"/api/zarr/{archive}/").json()["drift_count"] == 0
    assert owner.client.post(f"/api/zarr/{archive}/upload/complete/").status_code == 200
    assert_tree_matches_storage(archive)
