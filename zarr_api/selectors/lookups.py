"""Rows by their public identifiers (404 when absent), and archives annotated for the API."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from zarr_api.exceptions import NotFound
from zarr_api.models import CHANGING_STATES, Asset, Batch, Dandiset, Shard, Version, ZarrArchive

# The largest primary key a database row can have (a 64-bit signed integer).
MAX_ROW_ID = 2**63 - 1


def parse_zarr_id(zarr_id: object) -> uuid.UUID | None:
    """A UUID (zarr ids and asset ids are UUIDs), or None when ``zarr_id`` is none."""
    try:
        return zarr_id if isinstance(zarr_id, uuid.UUID) else uuid.UUID(str(zarr_id))
    except ValueError:
        return None


def parse_row_id(text: str) -> int | None:
    """A row's integer id (a dandiset's identifier, a batch's id), or None when ``text`` is
    not one (not ASCII digits, or past what a database row id can be)."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_ROW_ID:
        return None
    return int(text)


def archive_get(zarr_id: str | uuid.UUID) -> ZarrArchive:
    parsed = parse_zarr_id(zarr_id)
    if parsed is None:
        raise NotFound(f"no zarr archive with zarr_id {zarr_id!r}: zarr ids are UUIDs")
    try:
        return ZarrArchive.objects.select_related("dandiset").get(zarr_id=parsed)
    except ZarrArchive.DoesNotExist as error:
        raise NotFound(f"no zarr archive with zarr_id {zarr_id}") from error


def dandiset_get(identifier: str) -> Dandiset:
    pk = parse_row_id(identifier)
    if pk is None:
        raise NotFound(f"no dandiset {identifier!r}: identifiers are six digits")
    try:
        return Dandiset.objects.get(pk=pk)
    except Dandiset.DoesNotExist as error:
        raise NotFound(f"no dandiset {identifier}") from error


def version_get(identifier: str, version: str) -> Version:
    dandiset = dandiset_get(identifier)
    found = Version.objects.filter(dandiset=dandiset, version=version).first()
    if found is None:
        raise NotFound(f"dandiset {identifier} has no version {version!r}")
    return found


def asset_get(identifier: str, version: str, asset_id: str) -> Asset:
    assets = version_get(identifier, version).assets.select_related("zarr", "version__dandiset")
    parsed = parse_zarr_id(asset_id)
    if parsed is None:
        raise NotFound(f"no asset {asset_id!r} in {identifier}/{version}: asset ids are UUIDs")
    found = assets.filter(asset_id=parsed).first()
    if found is None:
        raise NotFound(f"no asset {asset_id} in {identifier}/{version}")
    return found


def batch_get(archive: ZarrArchive, batch_id: str) -> Batch:
    pk = parse_row_id(batch_id)
    batch = Batch.objects.filter(archive=archive, pk=pk).first() if pk is not None else None
    if batch is None:
        raise NotFound(f"zarr archive {archive.zarr_id} has no batch {batch_id!r}")
    return batch


def archives_annotated() -> QuerySet[ZarrArchive]:
    """Archives with ``has_open_batch`` and ``has_pending_batch`` for the API's status fields."""
    return ZarrArchive.objects.select_related("dandiset").annotate(
        has_open_batch=Exists(Batch.objects.filter(archive=OuterRef("pk"), state=Batch.State.OPEN)),
        has_pending_batch=Exists(
            Batch.objects.filter(archive=OuterRef("pk"), state__in=CHANGING_STATES)
        ),
        live_shards=Coalesce(
            Subquery(
                Shard.objects.filter(archive=OuterRef("pk"), state=Shard.State.LIVE)
                .values("archive")
                .annotate(n=Count("pk"))
                .values("n")[:1]
            ),
            0,
        ),
    )


def annotated_archive_get(zarr_id: str) -> ZarrArchive:
    parsed = parse_zarr_id(zarr_id)
    archive = archives_annotated().filter(zarr_id=parsed).first() if parsed else None
    if archive is None:
        raise NotFound(f"no zarr archive with zarr_id {zarr_id!r}")
    return archive


def archives_with_stalled_tree_updates(older_than_seconds: int = 60) -> list[int]:
    """Archives with a batch pending for longer than a tree update takes (its task was lost)."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    return list(
        Batch.objects.filter(state=Batch.State.PENDING, completed__lt=cutoff)
        .values_list("archive_id", flat=True)
        .distinct()
    )
