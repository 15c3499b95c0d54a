"""The md5 of a file sent in parts, proven from its bytes before its batch is applied.

A multipart object's ETag proves which parts it is made of (each part's md5 was checked), not
the md5 of the whole, which the tree hash needs. The tree update reads each completed upload of
its archive's pending batches from storage (streamed, conditional on the object's ETag, without
locks) and compares the md5 with the declared one. A match makes the row proven (the batch may
be applied); a mismatch fails the batch: what it uploaded is deleted as a cancel deletes it,
and its ``error`` names the file, the declared md5 and the md5 of the bytes.
"""

from __future__ import annotations

import logging

from django.db import transaction

from dandizarr.objectstore import ObjectNotFound, PreconditionFailed
from dandizarr_server.zarr_api.models import BUSY_STATES, Batch, BatchFile, MultipartUpload
from dandizarr_server.zarr_api.selectors.stored_md5s import object_md5
from dandizarr_server.zarr_api.services.archive_locks import lock_archive
from dandizarr_server.zarr_api.services.batch_endings import cancellation_finish

logger = logging.getLogger(__name__)

# How a batch that failed its md5 proof says so (its ``error`` starts with this).
PROOF_FAILED = "md5 proof failed: "


def pending_uploads_prove(archive_pk: int) -> None:
    """Prove every completed upload of the archive's pending batches; idempotent, no locks
    held while reading (a proof reads the whole file)."""
    uploads = MultipartUpload.objects.filter(
        archive_id=archive_pk,
        batch__state=Batch.State.PENDING,
        state=MultipartUpload.State.COMPLETED,
    ).order_by("batch__sequence", "pk")
    for upload in list(uploads):
        try:
            actual: str | None = object_md5(upload.key, upload.etag, upload.size)
        except (ObjectNotFound, PreconditionFailed):
            actual = None
        if actual == upload.md5:
            MultipartUpload.objects.filter(
                pk=upload.pk, state=MultipartUpload.State.COMPLETED
            ).update(state=MultipartUpload.State.PROVEN)
            continue
        MultipartUpload.objects.filter(pk=upload.pk).update(state=MultipartUpload.State.FAILED)
        if actual is None:
            why = (
                f"{PROOF_FAILED}{upload.path!r} was replaced or deleted in storage before its "
                f"md5 (declared {upload.md5}) could be proven. Upload it again"
            )
        else:
            why = (
                f"{PROOF_FAILED}{upload.path!r} was declared with md5 {upload.md5}; its bytes "
                f"have md5 {actual}. Its parts were as declared: the file's md5 was computed "
                "wrongly, or the file changed while it was read. Upload it again"
            )
        batch_fail(upload.batch_id, why)


def batch_fail(batch_pk: int | None, error: str) -> None:
    """Fail a pending batch whose file did not prove: delete what it uploaded (as a cancel
    does, through its intent, so a crash is finished by the sweep), then mark it failed."""
    if batch_pk is None:
        return
    with transaction.atomic():
        batch = Batch.objects.select_related("archive").get(pk=batch_pk)
        lock_archive(batch.archive)
        batch = Batch.objects.select_for_update().get(pk=batch_pk)
        if batch.state != Batch.State.PENDING:
            return
        # A later batch writing a path of this one owns its key now (this batch's bytes there
        # were replaced): the cancel below must neither delete nor unlist it.
        later = BatchFile.objects.filter(
            batch__archive_id=batch.archive_id, batch__pk__gt=batch.pk, batch__state__in=BUSY_STATES
        ).values("path")
        BatchFile.objects.filter(batch=batch, path__in=later).delete()
        batch.state = Batch.State.CANCELLING
        batch.note = error[:255]
        batch.save(update_fields=["state", "note"])
    cancellation_finish(batch_pk)
    Batch.objects.filter(pk=batch_pk, state=Batch.State.CANCELLED).update(
        state=Batch.State.FAILED, error=error
    )
    logger.warning("batch %s failed: %s", batch_pk, error)
