"""An archive's open batch: the one rule of which batch that is (at most one per archive is
open; its files may still be PUT), for services, views, status fields and annotations."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import OuterRef, Q, QuerySet

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive


def open_batches(archive: ZarrArchive | OuterRef) -> QuerySet[Batch]:
    """The archive's open batch as a query (an ``OuterRef`` for an ``Exists`` annotation)."""
    return Batch.objects.filter(Q(archive=archive), state=Batch.State.OPEN)


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
