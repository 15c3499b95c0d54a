"""The API's and pages' lists: archives by dandiset and name, a dandiset's versions, a
version's assets by path, an archive's latest batches."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from dandizarr_server.zarr_api.domain.permissions import Requester
from dandizarr_server.zarr_api.models import Asset, Batch, Dandiset, Version, ZarrArchive
from dandizarr_server.zarr_api.parsers.archive_filters import ArchiveFilters
from dandizarr_server.zarr_api.parsers.assets import AssetFilters
from dandizarr_server.zarr_api.selectors.lookups import archives_annotated


def archives_listed(requester: Requester | None, filters: ArchiveFilters) -> QuerySet[ZarrArchive]:
    """The archives ``requester`` may read (annotated for the API's status fields) that
    ``filters`` selects."""
    archives = archives_annotated(requester)
    if filters.dandiset_id is not None:
        archives = archives.filter(dandiset_id=filters.dandiset_id)
    if filters.name is not None:
        archives = archives.filter(name=filters.name)
    return archives


def dandiset_versions(dandiset: Dandiset) -> QuerySet[Version]:
    return Version.objects.filter(dandiset=dandiset).select_related("dandiset")


def version_assets(version: Version, filters: AssetFilters) -> QuerySet[Asset]:
    assets = version.assets.select_related("zarr", "version")
    if filters.path_prefix is not None:
        assets = assets.filter(path__startswith=filters.path_prefix)
    if filters.path_regex is not None:
        assets = assets.filter(path__iregex=filters.path_regex)
    return assets


def batch_history(archive: ZarrArchive, count: int) -> list[Batch]:
    """The archive's latest ``count`` batches, newest first, with ``file_total`` each."""
    return list(
        Batch.objects.filter(archive=archive)
        .annotate(file_total=Count("files"))
        .order_by("-id")[:count]
    )
