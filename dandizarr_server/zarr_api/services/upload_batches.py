"""Upload batches: opened with presigned PUT URLs, verified against storage on completion
(then queued for a tree update), or cancelled with the tree kept equal to storage."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, Forbidden, NotFound
from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime import metrics
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.selectors.batch_states import (
    open_batch_find,
    open_batch_get,
    stale_open_batches,
)
from dandizarr_server.zarr_api.selectors.expected_uploads import DeclaredFile, declared_files
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.selectors.stored_objects import stored_heads
from dandizarr_server.zarr_api.services.archive_locks import lock_archive
from dandizarr_server.zarr_api.services.batch_endings import (
    CLEANUP_PENDING,
    cancellation_finish,
)
from dandizarr_server.zarr_api.services.batch_rules import (
    OPEN_UPLOAD_NOTE,
    UploadTarget,
    Verification,
    open_batch_create,
    open_batch_join,
    upload_targets_sign,
)
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert, record_sizes
from dandizarr_server.zarr_api.services.multipart_uploads import (
    completed_uploads,
    multipart_uploads_complete,
    multipart_uploads_open,
)
from dandizarr_server.zarr_api.services.pack_batches import uploaded_shards_verify
from dandizarr_server.zarr_api.services.part_pages import first_pages_sign
from dandizarr_server.zarr_api.services.url_lifetimes import reconcile_when_urls_expire

logger = logging.getLogger(__name__)


def batch_start(
    *, user: Requester, archive: ZarrArchive, files: Sequence[FileDeclaration], acl: str = ""
) -> list[UploadTarget]:
    """Open a batch of ``files``; their URLs are bound to each md5 (or require ``acl``)."""
    with transaction.atomic():
        paths = [f.path for f in files]
        batch = open_batch_create(user=user, archive=archive, kind=Batch.Kind.UPLOAD, paths=paths)
        batch_files_insert(batch.pk, ((f.path, f.md5, None) for f in files))
        return upload_targets_issue(archive, batch, files, acl)


def upload_targets_issue(
    archive: ZarrArchive, batch: Batch, files: Sequence[FileDeclaration], acl: str
) -> list[UploadTarget]:
    """Each file's URL bound to its md5 (or requiring ``acl``), or a big file's first page of
    part URLs (its upload in parts opened)."""
    in_parts = multipart_uploads_open(archive, batch, files)
    pages = first_pages_sign([in_parts[f.path] for f in files if f.path in in_parts])
    whole = upload_targets_sign(
        [(f.path, archive.storage_prefix + f.path, f.md5) for f in files if f.path not in in_parts],
        acl=acl,
    )
    signed = {path: UploadTarget(path, None, page) for path, page in pages.items()}
    signed |= {t.path: t for t in whole}
    return [signed[f.path] for f in files]


def batch_files_add(
    *, user: Requester, archive: ZarrArchive, files: Sequence[FileDeclaration], acl: str = ""
) -> list[UploadTarget]:
    """Add ``files`` to the open batch its uploader started with ``POST upload/``, so a client
    can ask for the next URLs while its PUTs run (one batch, verified once when completed)."""
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)  # before telling whether a batch is open
        batch = open_batch_get(archive)  # NotFound when there is none
        if batch.kind != Batch.Kind.UPLOAD or batch.note == OPEN_UPLOAD_NOTE:
            raise Conflict(
                f"zarr archive {archive.zarr_id}: files can only be added to a batch of files "
                f"started with POST upload/ (batch {batch.pk} is not one)",
                code="batch_wrong_kind",
            )
        if recorded_user(user) != batch.user:
            raise Conflict(
                f"zarr archive {archive.zarr_id}: batch {batch.pk} is another client's upload; "
                "files can only be added to your own",
                code="batch_not_yours",
            )
        open_batch_join(user=user, archive=archive, batch=batch, files=files)
        return upload_targets_issue(archive, batch, files, acl)


def uploaded_files_verify(
    archive: ZarrArchive,
    files: Sequence[DeclaredFile],
    in_parts: Mapping[str, tuple[str, int]] | None = None,
) -> Verification:
    """Each file as stored against its declared md5 (a file sent in parts: the ETag and size
    its declared parts make, ``in_parts``; its md5 is proven later); records the stored size
    on the row."""
    result = Verification()
    heads = stored_heads(archive, [f.path for f in files])
    for f in files:
        info = heads[f.path]
        expected = (in_parts or {}).get(f.path, (f.md5, None))
        if info is None:
            result.missing.append(f.path)
        elif (info.etag, info.size if expected[1] is not None else None) != expected:
            result.mismatched.append({"path": f.path, "expected": expected[0], "actual": info.etag})
        else:
            f.size = info.size
    return result


def batch_complete(*, user: Requester, archive: ZarrArchive) -> Batch:
    """Verify every file of the open batch in storage; on success queue its tree update.

    Files sent in parts are completed first, before the archive is locked (a completion is
    storage work S3 may take a while over)."""
    found = open_batch_find(archive)
    if found is not None and found.kind == Batch.Kind.UPLOAD:
        require_writer(user, archive.dandiset)
        parts = multipart_uploads_complete(found)
        Verification(parts.missing, parts.mismatched).raise_unless_complete()
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        batch = open_batch_get(archive)
        files: list[DeclaredFile] = []
        if batch.kind == Batch.Kind.PACK:
            uploaded_shards_verify(batch).raise_unless_complete()
        else:
            files = declared_files(batch)
            uploaded_files_verify(archive, files, completed_uploads(batch)).raise_unless_complete()
            record_sizes(files)
        batch.state = Batch.State.PENDING
        batch.sequence = next_sequence(archive)
        batch.completed = timezone.now()
        reconcile_when_urls_expire(archive, batch)
        batch.save(update_fields=["state", "sequence", "completed", "reconcile_after"])
        tree_update_schedule(archive)
        verified = [f.size or 0 for f in files]
        transaction.on_commit(lambda: metrics.batch_completed(batch.kind, verified))
    return batch


def batch_cancel(
    *, user: Requester | None, archive: ZarrArchive, reason: str = "cancelled"
) -> Batch:
    """Cancel the open batch: delete what it uploaded, and keep the tree equal to storage.

    The intent commits first (state ``cancelling``: no more uploads are accepted into the
    batch, and the client's batch has ended), then ``cancellation_finish`` acts on storage. If
    storage fails, the cancel still answers: the failure is recorded on the batch
    (``CLEANUP_PENDING``) and the sweep (``unfinished_batch_ends_finish``) finishes it, as it
    finishes one a crash interrupted.
    """
    with transaction.atomic():
        archive = lock_archive(archive)
        found = open_batch_find(archive)
        # Who may cancel before whether there is anything to cancel: its uploader, or a writer.
        if user is not None and (found is None or user != found.user):
            require_writer(user, archive.dandiset)
        batch = found or open_batch_get(archive)  # NotFound when there is none
        batch.state = Batch.State.CANCELLING
        batch.completed = timezone.now()
        batch.note = reason
        batch.save(update_fields=["state", "completed", "note"])
        kind = batch.kind
        transaction.on_commit(lambda: metrics.batch_cancelled(kind))
    crash_point("cancel:intent-committed")
    try:
        return cancellation_finish(batch.pk)
    except Exception as error:
        logger.exception(
            "batch %s of zarr archive %s: storage cleanup failed; the sweep finishes it",
            batch.pk,
            archive.zarr_id,
        )
        batch.error = f"{CLEANUP_PENDING}{type(error).__name__}: {error}"
        batch.save(update_fields=["error"])
        return batch


def stale_batches_cancel() -> int:
    """Cancel open batches older than their URLs' expiry allows any client to still need. Each
    archive on its own (its own transaction): one that fails is logged and the sweep goes on.
    (Cancels whose storage cleanup failed are finished by ``unfinished_batch_ends_finish``.)"""
    cutoff = timezone.now() - timedelta(seconds=settings.DANDIZARR_STALE_BATCH_SECONDS)
    cancelled = 0
    stale = stale_open_batches(cutoff)
    for archive_pk in list(stale.values_list("archive_id", flat=True)):
        try:
            archive = ZarrArchive.objects.get(pk=archive_pk)
            batch_cancel(user=None, archive=archive, reason="stale: open past its URLs' expiry")
        except (NotFound, Forbidden, ZarrArchive.DoesNotExist):
            continue  # cancelled meanwhile
        except Exception:
            logger.exception("stale batch sweep: zarr archive %s failed; going on", archive_pk)
            continue
        cancelled += 1
    return cancelled
