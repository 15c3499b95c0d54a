"""An archive's open batch: the one rule of which batch that is (at most one per archive is
open; its files may still be PUT), for services, views, status fields and annotations."""

from __future__ import annotations

from django.db.models import OuterRef, Q, QuerySet

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, ZarrArchive


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
