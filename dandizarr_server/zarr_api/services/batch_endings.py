"""How a batch ends when it does not end in the tree: a cancel deletes what the batch uploaded,
a deletion deletes what it names. Each commits its intent first (state ``cancelling`` or
``deleting``), then acts on storage, then ends; the finishing steps here are idempotent, so
whoever comes next finishes one a crash or a storage failure interrupted: the next request on
the archive (``batch_endings_settle``), or the periodic sweep (``recovery``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user
from dandizarr_server.zarr_api.edge.exceptions import Conflict, unavailable_service
from dandizarr_server.zarr_api.models import Batch, MultipartUpload, ZarrArchive
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_snapshot
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.selectors.shard_members import packed_paths
from dandizarr_server.zarr_api.selectors.stored_md5s import stored_md5s
from dandizarr_server.zarr_api.selectors.stored_objects import storable_paths, stored_heads
from dandizarr_server.zarr_api.services.archive_locks import lock_archive
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert
from dandizarr_server.zarr_api.services.shard_objects import discard_shards
from dandizarr_server.zarr_api.services.url_lifetimes import reconcile_when_urls_expire

logger = logging.getLogger(__name__)

# How a cancelled batch whose storage cleanup failed says so (its ``error`` starts with this)
# until the stale-batch sweep retries the cleanup and brings the tree back to storage.
CLEANUP_PENDING = "storage cleanup pending: "


def cancellation_finish(batch_pk: int) -> Batch:
    """Delete what a cancelling batch uploaded and end it; idempotent (decides from what
    storage holds now, so a rerun after a crash half-way deletes the rest and unlists the
    same paths).

    A path the batch did not change (storage still holds the archive's version of it) is kept.
    Anything else the batch uploaded is deleted; where that was an overwrite, the old content
    is gone from storage too, so the path is removed from the archive by a deletion batch.
    """
    with transaction.atomic():
        archive = lock_archive(Batch.objects.get(pk=batch_pk).archive)
        batch = Batch.objects.get(pk=batch_pk)
        if batch.state != Batch.State.CANCELLING:
            return batch
        to_unlist: list[str] = []
        if batch.kind in (Batch.Kind.PACK, Batch.Kind.SESSION):
            # Nothing of a pack batch or a session's is in the archive before it is applied
            # (a session's files are one-member shards): drop its shards.
            discard_shards(batch.shards.all())
        else:
            to_unlist = uploaded_files_discard(
                archive, list(batch.files.values_list("path", flat=True))
            )
            multipart_uploads_drop(batch)
        crash_point("cancel:storage-deleted")
        transaction.on_commit(lambda: crash_point("cancel:pending-committed"))
        batch.state = Batch.State.CANCELLED
        batch.error = ""  # a cleanup that failed before (CLEANUP_PENDING) is done now
        reconcile_when_urls_expire(archive, batch)
        batch.save(update_fields=["state", "error", "reconcile_after"])
        if to_unlist:
            deletion_create(
                archive, None, to_unlist, note=f"overwritten by cancelled batch {batch.pk}"
            )
    return batch


def uploaded_files_discard(archive: ZarrArchive, paths: list[str]) -> list[str]:
    """Delete what a cancelled batch uploaded; returns the paths whose archive version went
    with it (to be removed from the tree)."""
    # Neither storage nor the tree can hold a key storage refuses: nothing to do for it.
    paths = storable_paths(archive, paths)
    # A packed file's bytes are in its shard, whatever happened to its loose key.
    packed = packed_paths(archive, paths)
    committed = archive_snapshot(archive).files_state(paths)
    heads = stored_heads(archive, paths)
    # A file sent in parts has an ETag that is not its md5: the md5 proven of its bytes.
    md5s = stored_md5s((i.key, i.etag) for i in heads.values() if i is not None)
    to_delete: list[str] = []
    to_unlist: list[str] = []
    for path in paths:
        info = heads[path]
        known = committed[path]
        stored = md5s[(info.key, info.etag)] if info is not None else None
        # A packed file has no loose object: one at its key is this batch's, whatever its md5.
        if path not in packed and info is not None and known is not None and stored == known.md5:
            continue  # storage still holds the archive's version
        if info is not None:
            to_delete.append(path)
        if known is not None and path not in packed:
            to_unlist.append(path)
    get_store().delete_many(archive.storage_prefix + p for p in to_delete)
    return to_unlist


def multipart_uploads_drop(batch: Batch) -> None:
    """Abort the uploads in parts the ending batch left open (storage bills their parts); those
    it completed are aborted too (their objects were deleted with the rest of the batch's)."""
    unfinished = MultipartUpload.State.OPEN, MultipartUpload.State.COMPLETED
    uploads = list(batch.multipart.filter(state__in=unfinished))
    store = get_store()
    opened = [u for u in uploads if u.state == MultipartUpload.State.OPEN]
    store.map_requests(lambda u: store.abort_multipart_upload(u.key, u.upload_id), opened)
    MultipartUpload.objects.filter(pk__in=[u.pk for u in uploads]).update(
        state=MultipartUpload.State.ABORTED
    )


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
        deletion_enqueue(archive, deletion)
        reconcile_when_urls_expire(archive, deletion)
        deletion.save(update_fields=["state", "sequence", "completed", "reconcile_after"])
    return deletion


def deletion_create(
    archive: ZarrArchive, user: Requester | None, paths: Sequence[str], note: str
) -> Batch:
    """A pending deletion batch of ``paths`` whose objects are gone already (archive row
    locked by the caller). Not reconciled on its own: its callers (a cancel, a
    reconciliation) check the same keys."""
    deletion = deletion_intent(archive, user, paths, note)
    deletion_enqueue(archive, deletion)
    deletion.save(update_fields=["state", "sequence", "completed"])
    return deletion


def deletion_intent(
    archive: ZarrArchive, user: Requester | None, paths: Sequence[str], note: str
) -> Batch:
    deletion = Batch.objects.create(
        archive=archive,
        kind=Batch.Kind.DELETE,
        state=Batch.State.DELETING,
        user=recorded_user(user),
        note=note,
    )
    batch_files_insert(deletion.pk, ((p, "", None) for p in paths))
    return deletion


def deletion_enqueue(archive: ZarrArchive, deletion: Batch) -> None:
    """Queue the deletion for the tree (pending, its sequence taken, its update scheduled); the
    caller saves it."""
    deletion.state = Batch.State.PENDING
    deletion.sequence = next_sequence(archive)
    deletion.completed = timezone.now()
    tree_update_schedule(archive)


# The step that finishes each state a batch is left in while it ends.
BATCH_END_FINISHERS = {
    Batch.State.CANCELLING: cancellation_finish,
    Batch.State.DELETING: deletion_finish,
}


def batch_endings_settle(archive: ZarrArchive) -> None:
    """Finish every cancel or deletion of ``archive`` still in progress (archive row locked by
    the caller), so that a storage failure during one delays the next request on the archive
    only until storage answers again, not until the sweep comes by. While storage is
    unreachable the caller's request is refused (503, Retry-After) and nothing is changed."""
    endings = Batch.objects.filter(archive=archive, state__in=list(BATCH_END_FINISHERS))
    for batch_pk, state in endings.order_by("pk").values_list("pk", "state"):
        try:
            with transaction.atomic():
                BATCH_END_FINISHERS[Batch.State(state)](batch_pk)
        except Exception as error:
            logger.warning("finishing the %s of batch %s failed: %s", state, batch_pk, error)
            if unavailable_service(error) is not None:
                raise  # 503 with Retry-After: the client repeats its request
            raise Conflict(
                f"zarr archive {archive.zarr_id} is finishing the {state} of batch {batch_pk} "
                f"and it failed ({type(error).__name__}); try again in a minute",
                code="batch_ending_failed",
            ) from error
