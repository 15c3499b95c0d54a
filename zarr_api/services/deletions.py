"""Deleting files of an archive: a deletion batch, applied to the tree like any other.

The intent commits first (the batch, state ``deleting``), then storage is acted on, then the
batch becomes pending for its tree update; a crash at any step leaves a batch the periodic
sweep finishes (``deletion_finish`` is idempotent), so tree and storage converge on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from zarr_api.crash import crash_point
from zarr_api.exceptions import Conflict, NotFound
from zarr_api.models import Batch, BatchFile, ZarrArchive
from zarr_api.permissions import Requester, recorded_user, require_writer
from zarr_api.selectors.archive_contents import archive_snapshot
from zarr_api.services.archive_locks import (
    has_open_batch,
    lock_archive,
    next_sequence,
    require_no_batch_ending,
    require_unfrozen,
)
from zarr_api.services.tree_updates import tree_update_schedule
from zarr_api.services.url_lifetimes import reconcile_when_urls_expire
from zarr_api.storage import get_store


def files_delete(*, user: Requester, archive: ZarrArchive, paths: Sequence[str]) -> Batch:
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        require_unfrozen(archive)
        if has_open_batch(archive):
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload batch in progress; complete or "
                "cancel it before deleting files"
            )
        require_no_batch_ending(archive)
        state = archive_snapshot(archive).files_state(paths)
        missing = [p for p in paths if state[p] is None]
        if missing:
            raise NotFound(
                f"{len(missing)} of the paths are not in zarr archive {archive.zarr_id}, so "
                f"nothing was deleted: {', '.join(repr(p) for p in missing[:5])}",
                missing=missing,
            )
        deletion = _deletion_intent(archive, user, paths, note="deleted by request")
    crash_point("delete:intent-committed")
    return deletion_finish(deletion.pk)


def deletion_finish(batch_pk: int) -> Batch:
    """Delete the objects of a committed deletion, then queue its tree update. Idempotent:
    run again after a crash at any point, it ends in the same state."""
    with transaction.atomic():
        archive = lock_archive(Batch.objects.get(pk=batch_pk).archive)
        deletion = Batch.objects.get(pk=batch_pk)
        if deletion.state != Batch.State.DELETING:
            return deletion
        paths = list(deletion.files.values_list("path", flat=True))
        get_store().delete_many(archive.storage_prefix + p for p in paths)
        crash_point("delete:storage-deleted")
        transaction.on_commit(lambda: crash_point("delete:pending-committed"))
        _pending(archive, deletion)
        reconcile_when_urls_expire(archive, deletion)
        deletion.save(update_fields=["state", "sequence", "completed", "reconcile_after"])
    return deletion


def deletion_create(
    archive: ZarrArchive, user: Requester | None, paths: Sequence[str], note: str
) -> Batch:
    """A pending deletion batch of ``paths`` whose objects are gone already (archive row
    locked by the caller). Not reconciled on its own: its callers (a cancel, a
    reconciliation) check the same keys."""
    deletion = _deletion_intent(archive, user, paths, note)
    _pending(archive, deletion)
    deletion.save(update_fields=["state", "sequence", "completed"])
    return deletion


def _deletion_intent(
    archive: ZarrArchive, user: Requester | None, paths: Sequence[str], note: str
) -> Batch:
    deletion = Batch.objects.create(
        archive=archive,
        kind=Batch.Kind.DELETE,
        state=Batch.State.DELETING,
        user=recorded_user(user),
        note=note,
    )
    BatchFile.objects.bulk_create(BatchFile(batch=deletion, path=p) for p in paths)
    return deletion


def _pending(archive: ZarrArchive, deletion: Batch) -> None:
    deletion.state = Batch.State.PENDING
    deletion.sequence = next_sequence(archive)
    deletion.completed = timezone.now()
    tree_update_schedule(archive)
