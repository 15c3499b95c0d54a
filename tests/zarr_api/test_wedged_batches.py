"""A batch that cannot be finished never wedges its archive (issue #16, finding 3).

An open batch holding a key storage refuses (a batch opened by an older version, before paths
were checked strictly), or a batch whose storage cleanup fails: complete answers 400, cancel
always ends the batch (by its owner, staff, the admin action or the sweep), and the sweep goes
on past an archive that fails. A failed cleanup is recorded on the batch and finished by the sweep.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.admin.sites import site
from django.test import RequestFactory
from django.utils import timezone

from dandizarr_server.zarr_api import tasks
from dandizarr_server.zarr_api.admin import ZarrArchiveAdmin
from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive
from dandizarr_server.zarr_api.services.batch_endings import CLEANUP_PENDING
from tests.support.api import (
    Actor,
    cancel_while_storage_is_down,
    create_archive,
    md5,
    storage_listing,
    upload,
)
from tests.support.tree_check import assert_tree_matches_storage

# No backend holds such a key: a 300-byte name (the local store's limit is 244), 1100 bytes
# in all (S3's is 1024).
REFUSED = "a/" + "/".join(["x" * 300] * 4)


def open_batch_with_a_refused_key(owner: Actor, zarr_id: str) -> Batch:
    """A batch as an older version opened it: one good file uploaded, one refused key."""
    upload(owner.client, zarr_id, {"a/good": b"good"}, complete=False)
    batch = Batch.objects.get(archive__zarr_id=zarr_id, state="open")
    BatchFile.objects.create(batch=batch, path=REFUSED, md5=md5(b"x"))
    return batch


def make_stale(*zarr_ids: str) -> None:
    Batch.objects.filter(archive__zarr_id__in=zarr_ids, state="open").update(
        created=timezone.now() - timedelta(days=3)
    )


def test_complete_names_a_refused_key_and_cancel_ends_the_batch(owner: Actor, archive: str) -> None:
    upload(owner.client, archive, {"keep": b"k"})
    open_batch_with_a_refused_key(owner, archive)
    response = owner.client.post(f"/api/zarr/{archive}/upload/complete/")
    assert response.status_code == 400, response.content
    assert response.json()["missing"] == [REFUSED]
    assert owner.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204
    assert owner.client.get(f"/api/zarr/{archive}/upload/").status_code == 404
    assert sorted(storage_listing(archive)) == ["keep"]
    assert_tree_matches_storage(archive)
    assert upload(owner.client, archive, {"next": b"n"}).status_code == 200


def test_staff_and_the_admin_action_cancel_it(
    owner: Actor, admin_actor: Actor, archive: str, dandiset: str
) -> None:
    open_batch_with_a_refused_key(owner, archive)
    assert admin_actor.client.delete(f"/api/zarr/{archive}/upload/").status_code == 204
    open_batch_with_a_refused_key(owner, archive)
    request = RequestFactory().post("/admin/zarr_api/zarrarchive/")
    request.user = admin_actor.user
    messages: list[str] = []
    model_admin = ZarrArchiveAdmin(ZarrArchive, site)
    model_admin.message_user = lambda request, message, *a, **k: messages.append(message)  # type: ignore[method-assign]
    model_admin.cancel_stuck_upload(request, ZarrArchive.objects.filter(zarr_id=archive))
    assert messages and "cancelled" in messages[0], messages
    assert not Batch.objects.filter(archive__zarr_id=archive, state="open").exists()
    assert_tree_matches_storage(archive)


def test_the_sweep_goes_on_past_an_archive_it_cannot_clean(
    owner: Actor, archive: str, dandiset: str, settings
) -> None:
    # The wedged archive first, so the sweep meets it before the healthy one.
    other = create_archive(owner, dandiset, "b.zarr", layout="loose")
    open_batch_with_a_refused_key(owner, archive)
    upload(owner.client, other, {"x": b"x"}, complete=False)
    make_stale(archive, other)
    assert tasks.cancel_stale_batches() == 2
    assert not Batch.objects.filter(state="open").exists()
    for zarr_id in (archive, other):
        assert storage_listing(zarr_id) == {}
        assert_tree_matches_storage(zarr_id)


def test_a_cancel_while_storage_is_down_ends_the_batch_and_the_sweep_cleans_up(
    owner: Actor, zarr_id: str, settings
) -> None:
    working_endpoint = cancel_while_storage_is_down(owner, zarr_id, settings)
    # The intent is committed (the batch is no longer open), the failure recorded on it.
    batch = Batch.objects.get(archive__zarr_id=zarr_id, kind="upload", state="cancelling")
    assert batch.error.startswith(CLEANUP_PENDING), batch.error
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    settings.DANDIZARR_S3_ENDPOINT_URL = working_endpoint
    assert tasks.finish_batch_ends() == 1  # the sweep finishes the cancel once storage is back
    batch.refresh_from_db()
    assert (batch.state, batch.error) == ("cancelled", "")
    # Not wedged: the next batch starts and completes.
    assert upload(owner.client, zarr_id, {"next": b"n"}).status_code == 200
    assert sorted(storage_listing(zarr_id)) == ["keep", "next"]
    assert_tree_matches_storage(zarr_id)


def test_the_next_request_finishes_a_cancel_storage_failed_without_waiting_for_the_sweep(
    owner: Actor, zarr_id: str, settings
) -> None:
    working_endpoint = cancel_while_storage_is_down(owner, zarr_id, settings)
    batches_before = Batch.objects.filter(archive__zarr_id=zarr_id).count()
    # Storage still down: the start cannot finish the cancel, so it is refused, changing nothing.
    refused = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", [{"path": "next", "etag": md5(b"n")}], format="json"
    )
    assert refused.status_code == 503, refused.content
    assert "storage" in refused.json()["detail"] and refused["Retry-After"]
    deleted = owner.client.delete(f"/api/zarr/{zarr_id}/files/", [{"path": "keep"}], format="json")
    assert deleted.status_code == 503, deleted.content
    assert Batch.objects.filter(archive__zarr_id=zarr_id).count() == batches_before
    assert Batch.objects.get(archive__zarr_id=zarr_id, kind="upload", state="cancelling")
    # Storage back: the next start finishes the cancel itself and opens its batch.
    settings.DANDIZARR_S3_ENDPOINT_URL = working_endpoint
    assert upload(owner.client, zarr_id, {"next": b"n"}).status_code == 200
    assert not Batch.objects.filter(archive__zarr_id=zarr_id, state="cancelling").exists()
    assert tasks.finish_batch_ends() == 0  # nothing was left for the sweep
    assert sorted(storage_listing(zarr_id)) == ["keep", "next"]
    assert_tree_matches_storage(zarr_id)
