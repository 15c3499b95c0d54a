"""Rows by their public identifiers (404 when absent), archives annotated for the API, and the
archives an operator's command goes through."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from dandizarr_server.zarr_api.domain.permissions import (
    Requester,
    readable_dandisets,
    user_can_read,
)
from dandizarr_server.zarr_api.edge.exceptions import Conflict, NotFound, SignInRequired
from dandizarr_server.zarr_api.models import (
    ArchiveVersion,
    Asset,
    Batch,
    Dandiset,
    Shard,
    Version,
    ZarrArchive,
)
from dandizarr_server.zarr_api.parsers.identifiers import parse_row_id, parse_zarr_id
from dandizarr_server.zarr_api.selectors.archive_rows import archive_row
from dandizarr_server.zarr_api.selectors.archive_versions import archive_version_find
from dandizarr_server.zarr_api.selectors.batch_states import changing_batches, open_batches

# Versions by their ids: rows that never change once made, so each is looked up once.
_known_versions: dict[uuid.UUID, ArchiveVersion] = {}
_KNOWN_VERSIONS = 100_000


def archive_get(zarr_id: str | uuid.UUID, requester: Requester | None) -> ZarrArchive:
    """The archive, if ``requester`` may read it (zarr_api.domain.permissions); else, as
    when there
    is none, NotFound."""
    parsed = parse_zarr_id(zarr_id)
    if parsed is None:
        raise NotFound(f"no zarr archive with zarr_id {zarr_id!r}: zarr ids are UUIDs")
    # The row with its dandiset's, read every time (archive_rows: the SQL compiled once).
    version = _known_versions.get(parsed)
    if version is not None:
        archive = archive_row("pk", version.archive_id)
    else:
        archive = archive_row("zarr_id", parsed)
        if archive is None:
            # A version's own id (what a published asset names): the archive, read as of it.
            version = ArchiveVersion.objects.filter(version_id=parsed).first()
            if version is not None:
                archive = archive_row("pk", version.archive_id)
                # A published version never changes nor goes; a snapshot goes with its session.
                published = version.kind == ArchiveVersion.Kind.PUBLISHED
                if published and len(_known_versions) < _KNOWN_VERSIONS:
                    _known_versions[parsed] = version
    if archive is not None and version is not None:
        archive.as_of = version
    if archive is None or not user_can_read(requester, archive.dandiset):
        raise NotFound(f"no zarr archive with zarr_id {zarr_id}")
    return archive


def require_draft(archive: ZarrArchive) -> None:
    """Conflict when ``archive`` was looked up by a version's id: a published version is
    read-only, whatever the route (docs/versions.md)."""
    if archive.as_of is not None:
        what = (
            f"version {archive.as_of.number} of zarr archive {archive.zarr_id} is published"
            if archive.as_of.kind == ArchiveVersion.Kind.PUBLISHED
            else f"a write session's snapshot of zarr archive {archive.zarr_id} is"
        )
        raise Conflict(
            f"{what} and read-only; change the draft (zarr_id {archive.zarr_id}) instead",
            code="version_read_only",
        )


def archive_for_write(zarr_id: str | uuid.UUID, requester: Requester | None) -> ZarrArchive:
    """The archive whose draft a request changes: as ``archive_get`` finds it (NotFound for
    what ``requester`` may not read), and Conflict for a version's id. Every route that writes
    through an id looks it up here."""
    archive = archive_get(zarr_id, requester)
    require_draft(archive)
    return archive


def archive_version_get(
    zarr_id: str | uuid.UUID, number: str, requester: Requester | None
) -> ZarrArchive:
    """The archive read as of its version ``number`` (``/zarr/{zarr_id}/versions/{n}/``)."""
    archive = archive_get(zarr_id, requester)
    version = archive_version_find(archive, number) if archive.as_of is None else None
    if version is None:
        raise NotFound(f"zarr archive {zarr_id} has no version {number!r}")
    archive.as_of = version
    return archive


def dandiset_get(identifier: str, requester: Requester | None) -> Dandiset:
    """The dandiset, if ``requester`` may read it; else, as when there is none, NotFound, or
    for a request without credentials SignInRequired (401): the DANDI client signs in (with
    ``DANDI_API_KEY``) only after a 401, and an absent dandiset answers the same, so the 401
    says nothing of whether a private one exists."""
    pk = parse_row_id(identifier)
    if pk is None:
        raise NotFound(f"no dandiset {identifier!r}: identifiers are six digits")
    dandiset = Dandiset.objects.filter(pk=pk).first()
    if dandiset is None or not user_can_read(requester, dandiset):
        if requester is None or not requester.is_authenticated:
            raise SignInRequired(
                f"no dandiset {identifier} is visible without credentials: send "
                "'Authorization: Token ...' if it is yours"
            )
        raise NotFound(f"no dandiset {identifier}")
    return dandiset


def version_get(identifier: str, version: str, requester: Requester | None) -> Version:
    dandiset = dandiset_get(identifier, requester)
    found = Version.objects.filter(dandiset=dandiset, version=version).first()
    if found is None:
        raise NotFound(f"dandiset {identifier} has no version {version!r}")
    return found


def asset_get(identifier: str, version: str, asset_id: str, requester: Requester | None) -> Asset:
    assets = version_get(identifier, version, requester).assets.select_related(
        "zarr", "version__dandiset"
    )
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


def readable_archives(requester: Requester | None) -> QuerySet[ZarrArchive]:
    return ZarrArchive.objects.filter(readable_dandisets(requester, "dandiset__"))


def archives_annotated(requester: Requester | None) -> QuerySet[ZarrArchive]:
    """The archives ``requester`` may read, with ``has_open_batch`` and ``has_pending_batch``
    for the API's status fields."""
    return (
        readable_archives(requester)
        .select_related("dandiset")
        .annotate(
            has_open_batch=Exists(open_batches(OuterRef("pk"))),
            has_pending_batch=Exists(changing_batches(OuterRef("pk"))),
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
    )


def annotated_archive_get(zarr_id: str, requester: Requester | None) -> ZarrArchive:
    parsed = parse_zarr_id(zarr_id)
    archive = archives_annotated(requester).filter(zarr_id=parsed).first() if parsed else None
    if archive is None:
        # A version's id: the archive as of it (archive_get checks who may read it).
        return archive_get(zarr_id, requester)
    return archive


def archives_with_stalled_tree_updates(older_than_seconds: int = 60) -> list[int]:
    """Archives with a batch pending for longer than a tree update takes (its task was lost)."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    return list(
        Batch.objects.filter(state=Batch.State.PENDING, completed__lt=cutoff)
        .values_list("archive_id", flat=True)
        .distinct()
    )


def readable_dandisets_list(requester: Requester | None) -> QuerySet[Dandiset]:
    """Every dandiset ``requester`` may read (lists, the home page)."""
    return Dandiset.objects.filter(readable_dandisets(requester))


def archives_for_operator(zarr_ids: Sequence[str] = ()) -> QuerySet[ZarrArchive]:
    """The archives an operator's command goes through, in creation order: those of
    ``zarr_ids``, or every one (no requester: the operator reads all)."""
    archives = ZarrArchive.objects.order_by("pk")
    return archives.filter(zarr_id__in=zarr_ids) if zarr_ids else archives


def archive_zarr_ids() -> set[str]:
    """The zarr id of every archive the database knows."""
    return {str(z) for z in ZarrArchive.objects.values_list("zarr_id", flat=True)}
