"""The audit rebuilds the tree from storage; the sweep cancels batches left open too long."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from dandizarr.objectstore import ObjectInfo
from dandizarr_server.zarr_api import tasks
from dandizarr_server.zarr_api.domain.keys import checksum_key
from dandizarr_server.zarr_api.edge.exceptions import Conflict
from dandizarr_server.zarr_api.models import Batch, TreeLock, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.audit import AUDIT_ATTEMPTS, archive_audit
from dandizarr_server.zarr_api.services.garbage import garbage_collect_all
from tests.support.api import Actor, create_archive, upload
from tests.support.database import another_connection
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


def test_the_operators_commands_go_through_the_archives_named_or_all(
    owner: Actor, dandiset: str, zarr_id: str
) -> None:
    """audit_zarr and collect_garbage: the archives named, or every one in creation order; an
    archive the database knows is never called unreferenced."""
    assert upload(owner.client, zarr_id, {"a": b"a"}).status_code == 200
    other = create_archive(owner, dandiset, "b.zarr", layout="loose")
    assert upload(owner.client, other, {"b": b"b"}).status_code == 200

    def collected(*args: str) -> list[str]:
        out = StringIO()
        call_command("collect_garbage", "--dry-run", *args, stdout=out)
        lines = out.getvalue().splitlines()
        return [json.loads(line)["zarr_id"] for line in lines if line.startswith("{")]

    assert collected(other) == [other]
    assert collected() == [zarr_id, other]
    assert [r.zarr_id for r in garbage_collect_all(dry_run=True)] == [zarr_id, other]
    out = StringIO()
    call_command("audit_zarr", "--report-only", stdout=out)
    assert out.getvalue().splitlines() == [
        f"{zarr_id}: ok {ZarrArchive.objects.get(zarr_id=zarr_id).checksum}",
        f"{other}: ok {ZarrArchive.objects.get(zarr_id=other).checksum}",
        "0 archive(s) had drift",
        "0 unreferenced archive(s) in storage",
    ]


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


# A change made meanwhile waits this long for a row lock the audit might hold, then fails (the
# audit held its locks over the listing: the change would wait for the listing it runs in).
WAIT_FOR_A_LOCK = "SET lock_timeout = '5s'"


# The tests below act from another connection while the audit runs: they commit their rows
# (transactional_db) so that connection sees them.


def _during_listings(
    monkeypatch: pytest.MonkeyPatch, archive: ZarrArchive, meanwhile: Callable[[int], None]
) -> list[str]:
    """Run ``meanwhile(n)`` as the audit's n-th listing of the archive's files starts (the
    report's); returns the prefixes listed."""
    store = get_store()
    listing = store.list_ordered
    listed: list[str] = []

    def list_ordered(prefix: str = "") -> Iterator[ObjectInfo]:
        listed.append(prefix)
        if prefix == archive.storage_prefix:
            meanwhile(listed.count(prefix))
        yield from listing(prefix)

    monkeypatch.setattr(store, "list_ordered", list_ordered)
    return listed


@pytest.fixture
def drifted(transactional_db: None, owner: Actor, zarr_id: str) -> ZarrArchive:
    """An archive of two files, one of them deleted from storage behind the tree's back."""
    assert upload(owner.client, zarr_id, {"a/1": b"1", "a/2": b"2"}).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    get_store().delete(archive.storage_prefix + "a/1")
    return archive


def _committed_elsewhere(statement: str, archive: ZarrArchive) -> None:
    """``statement`` (its one parameter the archive's id) run and committed from another
    connection, waiting at most WAIT_FOR_A_LOCK for a lock the audit might hold."""
    with another_connection(autocommit=True) as other:
        other.execute(WAIT_FOR_A_LOCK)
        other.execute(statement, [archive.pk])


def test_the_audit_lists_storage_with_no_database_lock_held(
    drifted: ZarrArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = drifted

    def lock_elsewhere(_: int) -> None:
        # Another client (a batch starting, a tree update) takes the archive's and the tree's
        # row locks at once: nothing of the audit's holds them while storage is listed.
        with another_connection() as other:
            for table, column in (
                (ZarrArchive._meta.db_table, "id"),
                (TreeLock._meta.db_table, "archive_id"),
            ):
                other.execute(
                    f"SELECT 1 FROM {table} WHERE {column} = %s FOR UPDATE NOWAIT", [archive.pk]
                )
            other.rollback()

    _during_listings(monkeypatch, archive, lock_elsewhere)
    report = archive_audit(archive)
    assert report.drift and report.file_count == 1
    assert_tree_matches_storage(str(archive.zarr_id))


def test_a_change_during_the_listing_has_the_audit_read_again(
    drifted: ZarrArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = drifted

    def first_time_a_tree_update(n: int) -> None:
        if n == 1:  # as a tree update committing meanwhile moves the row
            _committed_elsewhere(
                f"UPDATE {ZarrArchive._meta.db_table} SET modified = now() WHERE id = %s", archive
            )

    listed = _during_listings(monkeypatch, archive, first_time_a_tree_update)
    report = archive_audit(archive)
    assert listed.count(archive.storage_prefix) == 2
    assert report.drift and report.file_count == 1
    assert_tree_matches_storage(str(archive.zarr_id))


def test_an_archive_that_keeps_changing_is_refused_and_left_as_it_was(
    drifted: ZarrArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = drifted

    def a_batch_every_time(_: int) -> None:
        _committed_elsewhere(
            f"INSERT INTO {Batch._meta.db_table} (archive_id, kind, state, created, note, "
            "error, directories) VALUES (%s, 'delete', 'applied', now(), '', '', '[]')",
            archive,
        )

    listed = _during_listings(monkeypatch, archive, a_batch_every_time)
    with pytest.raises(Conflict) as refused:
        archive_audit(archive)
    assert refused.value.code == "archive_changed"
    assert listed.count(archive.storage_prefix) == AUDIT_ATTEMPTS
    archive.refresh_from_db()
    assert archive.file_count == 2  # nothing written: the tree still holds a/1
