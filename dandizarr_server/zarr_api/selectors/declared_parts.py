"""What open batches declare in parts: the figures the caps on declared bytes and parts are
checked against (``domain.declarations.check_declared_in_parts``), and one open upload of a
batch (the next page of its part URLs)."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import BigIntegerField, F, QuerySet, Sum
from django.db.models.functions import Coalesce

from dandizarr_server.zarr_api.domain.declarations import DeclaredInParts
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, MultipartUpload


def _open_uploads() -> QuerySet[MultipartUpload]:
    return MultipartUpload.objects.filter(
        state=MultipartUpload.State.OPEN, batch__state=Batch.State.OPEN
    )


def _declared(uploads: QuerySet[MultipartUpload]) -> DeclaredInParts:
    # A file in parts is over the threshold (never empty): its parts are ceil(size / part_size).
    parts = (F("size") + F("part_size") - 1) / F("part_size")
    totals = uploads.aggregate(
        bytes=Coalesce(Sum("size"), 0, output_field=BigIntegerField()),
        parts=Coalesce(Sum(parts, output_field=BigIntegerField()), 0),
    )
    return DeclaredInParts(int(totals["bytes"]), int(totals["parts"]))


def batch_declared_in_parts(batch: Batch, *, except_paths: Collection[str]) -> DeclaredInParts:
    """What the batch's open uploads declare, but those at ``except_paths`` (declared again)."""
    return _declared(_open_uploads().filter(batch=batch).exclude(path__in=list(except_paths)))


def account_declared_bytes(batch: Batch) -> int:
    """Bytes the open uploads of the other open batches of ``batch``'s uploader declare."""
    if batch.user_id is None:
        return 0
    others = _open_uploads().filter(batch__user_id=batch.user_id).exclude(batch=batch)
    return _declared(others).bytes


def open_upload_get(batch: Batch, path: str) -> MultipartUpload:
    """The open upload in parts of ``path`` in ``batch``; NotFound when it has none."""
    upload = MultipartUpload.objects.filter(
        batch=batch, path=path, state=MultipartUpload.State.OPEN
    ).first()
    if upload is None:
        raise NotFound(f"batch {batch.pk} uploads no file in parts at that path", code="not_found")
    return upload
