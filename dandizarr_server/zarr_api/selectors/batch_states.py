"""Which batches are in which state, the one home of each rule, for services, views, status
fields and annotations: an archive's open batch (at most one; its files may still be PUT),
its changing batches (ended but not yet in the tree: pending, cancelling, deleting), the
open batches past their URLs' lifetime."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import OuterRef, Q, QuerySet

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, BatchFile, Dandiset, ZarrArchive
from dandizarr_server.zarr_api.models.batches import CHANGING_STATES


def open_batches(archive: ZarrArchive | OuterRef) -> QuerySet[Batch]:
    """The archive's open batch as a query (an ``OuterRef`` for an ``Exists`` annotation)."""
    return Batch.objects.filter(Q(archive=archive), state=Batch.State.OPEN)


def open_batches_of_dandiset(dandiset: Dandiset) -> QuerySet[Batch]:
    return Batch.objects.filter(archive__dandiset=dandiset, state=Batch.State.OPEN)


def stale_open_batches(created_before: datetime) -> QuerySet[Batch]:
    """Open batches begun before ``created_before``, of every archive."""
    return Batch.objects.filter(state=Batch.State.OPEN, created__lt=created_before)


def open_batch_paths(archive: ZarrArchive) -> set[str]:
    """The paths the archive's open batch declares."""
    files = BatchFile.objects.filter(batch__archive=archive, batch__state=Batch.State.OPEN)
    return set(files.values_list("path", flat=True))


def changing_batches(archive: ZarrArchive | OuterRef) -> QuerySet[Batch]:
    """The archive's batches that ended and are not yet in its tree (pending, cancelling,
    deleting) as a query (an ``OuterRef`` for an ``Exists`` annotation)."""
    return Batch.objects.filter(Q(archive=archive), state__in=CHANGING_STATES)


def has_changing_batches(archive: ZarrArchive) -> bool:
    return changing_batches(archive).exists()


def archives_with_changing_batches(archives: Sequence[ZarrArchive]) -> set[str]:
    """The zarr ids of those of ``archives`` with a changing batch."""
    busy = Batch.objects.filter(archive__in=archives, state__in=CHANGING_STATES)
    return {str(z) for z in busy.values_list("archive__zarr_id", flat=True)}


def open_batch_find(archive: ZarrArchive) -> Batch | None:
    return open_batches(archive).first()


def has_open_batch(archive: ZarrArchive) -> bool:
    return open_batches(archive).exists()


def open_batch_get(archive: ZarrArchive) -> Batch:
    """The archive's open batch; NotFound (``no_open_batch``) when it has none."""
    batch = open_batch_find(archive)
    if batch is None:
        raise NotFound(
            f"zarr archive {archive.zarr_id} has no upload batch in progress",
            code="no_open_batch",
        )
    return batch


def loose_upload_paths(archive: ZarrArchive, paths: Sequence[str]) -> set[str]:
    """Those of ``paths`` an upload batch still open or pending writes loose: their loose
    objects are that batch's, whatever the tree says of the path now."""
    return set(
        BatchFile.objects.filter(
            batch__archive=archive,
            batch__kind=Batch.Kind.UPLOAD,
            batch__state__in=[Batch.State.OPEN, Batch.State.PENDING],
            path__in=list(paths),
        ).values_list("path", flat=True)
    )
