"""The audit rebuilds the tree from storage; the sweep cancels batches left open too long."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

from django.core.management import call_command
from django.utils import timezone

from dandizarr_server.zarr_api import tasks
from dandizarr_server.zarr_api.keys import checksum_key
from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.services.audit import archive_audit
from dandizarr_server.zarr_api.storage import get_store
from tests.support.api import Actor, upload
from tests.support.tree_check import assert_tree_matches_storage


def test_audit_reports_and_repairs_drift(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, {"a/1": b"1", "a/2": b"2", "b/3": b"3"}).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    report = archive_audit(archive)
    assert not report.drift

    # Drift of the kinds seen in the old design: an object deleted behind the tree's back, one
    # added behind it, and a stale .checksum of a directory that no longer exists.
    store = get_store()
    store.delete(archive.storage_prefix + "a/1")
    store.put(archive.storage_prefix + "c/4", b"4")
    store.put(checksum_key(zarr_id, "gone"), store.get(checksum_key(zarr_id, "b")))
    out = StringIO()
    call_command("audit_zarr", zarr_id, stdout=out)
    assert "DRIFT repaired" in out.getvalue()
    assert "1 archive(s) had drift" in out.getvalue()
    assert_tree_matches_storage(zarr_id)
    archive.refresh_from_db()
    assert archive.file_count == 3

    out = StringIO()
    call_command("audit_zarr", zarr_id, stdout=out)
    assert f"{zarr_id}: ok" in out.getvalue()


def test_audit_refuses_while_a_batch_is_open(owner: Actor, zarr_id: str) -> None:
    upload(owner.client, zarr_id, {"x": b"x"}, complete=False)
    out, err = StringIO(), StringIO()
    call_command("audit_zarr", zarr_id, stdout=out, stderr=err)
    assert "upload batch in progress" in err.getvalue()


def test_stale_open_batches_are_cancelled(owner: Actor, zarr_id: str, settings) -> None:
    settings.DANDIZARR_STALE_BATCH_SECONDS = 3600
    upload(owner.client, zarr_id, {"x": b"x"}, complete=False)
    assert tasks.cancel_stale_batches() == 0  # still fresh
    Batch.objects.filter(archive__zarr_id=zarr_id, state="open").update(
        created=timezone.now() - timedelta(hours=2)
    )
    assert tasks.cancel_stale_batches() == 1
    batch = Batch.objects.get(archive__zarr_id=zarr_id, kind="upload")
    assert batch.state == "cancelled" and "stale" in batch.note
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    assert_tree_matches_storage(zarr_id)
