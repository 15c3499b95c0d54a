"""The DANDI Archive's read shapes, built from our models (docs/api.md, "DANDI clients"): an
archive's status, an asset's metadata as the server completes it, a dandiset with its draft and
latest published version, a version's metadata, and the ``files`` listing of an archive."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max, Sum

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Asset, Dandiset, Version, ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_contents import (
    DirectoryNode,
    FileNode,
    files_below,
    node_get,
)
from dandizarr_server.zarr_api.selectors.archive_state import archive_state

ZARR_CHECKSUM_DIGEST = "dandi:dandi-zarr-checksum"
ZARR_MIME_TYPE = "application/x-zarr"


def asset_metadata(asset: Asset) -> dict[str, Any]:
    """The asset's metadata as stored, with what the server knows filled in: ``path``,
    ``encodingFormat``, and once the archive is complete ``contentSize`` and the zarr checksum
    digest (what a client sent for those never wins)."""
    metadata = dict(asset.metadata)
    archive = asset.zarr
    metadata["path"] = asset.path
    metadata.setdefault("encodingFormat", ZARR_MIME_TYPE)
    metadata["identifier"] = str(asset.asset_id)
    digest = dict(metadata.get("digest") or {})
    digest.pop(ZARR_CHECKSUM_DIGEST, None)
    if (held := asset.archive_version) is not None:
        # A published version's asset: its archive version, for good.
        digest[ZARR_CHECKSUM_DIGEST] = held.checksum
        metadata["contentSize"] = held.size
    elif archive_state(archive).dandi_status == "Complete":
        digest[ZARR_CHECKSUM_DIGEST] = archive.checksum
        metadata["contentSize"] = archive.size
    metadata["digest"] = digest
    return metadata


def _published(dandiset: Dandiset) -> Version | None:
    return dandiset.versions.exclude(version=Version.DRAFT).order_by("-created").first()


def version_summary(version: Version) -> dict[str, Any]:
    """A version as the DANDI API lists it."""
    assets = version.assets.all()
    sizes = "zarr__size" if version.is_draft else "archive_version__size"
    totals = assets.aggregate(size=Sum(sizes), modified=Max("modified"))
    modified: datetime = max(filter(None, [version.created, totals["modified"]]))
    return {
        "version": version.version,
        "name": version.dandiset.name,
        "asset_count": assets.count(),
        "size": totals["size"] or 0,
        "created": version.created,
        "modified": modified,
        "status": "Valid" if version.is_draft else "Published",
        "dandiset": {"identifier": version.dandiset.identifier},
    }


def dandiset_summary(dandiset: Dandiset) -> dict[str, Any]:
    """A dandiset as the DANDI API shows it (our own fields kept beside)."""
    draft = version_summary(dandiset.versions.get(version=Version.DRAFT))
    published = _published(dandiset)
    owner = dandiset.owners.order_by("pk").first()
    return {
        "identifier": dandiset.identifier,
        "created": dandiset.created,
        "modified": draft["modified"],
        "contact_person": owner.get_username() if owner is not None else "",
        "embargo_status": dandiset.embargo_status,
        "draft_version": draft,
        "most_recent_published_version": version_summary(published) if published else None,
    }


def version_metadata(version: Version) -> dict[str, Any]:
    """The version's Dandiset metadata (what ``dandi download`` writes to dandiset.yaml)."""
    dandiset = version.dandiset
    identifier = f"DANDI:{dandiset.identifier}"
    return {
        "schemaKey": "Dandiset",
        "schemaVersion": settings.DANDIZARR_DANDI_SCHEMA_VERSION,
        "identifier": identifier,
        "id": f"{identifier}/{version.version}",
        "name": dandiset.name,
        "description": dandiset.name,
        "version": version.version,
        "url": f"{settings.PUBLIC_URL}/dandiset/{dandiset.identifier}/{version.version}",
        "dateCreated": dandiset.created.isoformat(),
        "contributor": [],
        "license": [],
    }


def listing_entry(archive: ZarrArchive, node: FileNode) -> dict[str, Any]:
    """A file as the DANDI ``files`` listing gives it (its time: the archive's last change, or
    a version's publication: what a version holds never changes)."""
    changed = archive.as_of.created if archive.as_of is not None else archive.modified
    return {
        "Key": node.path,
        "LastModified": changed.isoformat(),
        "ETag": node.md5,
        "Size": node.size,
    }


def files_with_prefix(
    archive: ZarrArchive, prefix: str, *, after: str | None = None
) -> Iterator[FileNode]:
    """Every file whose path starts with ``prefix`` (any string), in path order, after
    ``after``: the files of one directory's subtree, read from the tree."""
    directory = posixpath.dirname(prefix)
    for node in files_below(archive, directory, after=after):
        if node.path.startswith(prefix):
            yield node
        elif node.path > prefix:
            return  # path order: every path with the prefix came already


def count_with_prefix(archive: ZarrArchive, prefix: str) -> int:
    """How many files start with ``prefix``: a directory's count when it names one."""
    if prefix == "" or prefix.endswith("/"):
        try:
            node = node_get(archive, prefix.rstrip("/"))
        except NotFound:
            return 0
        if isinstance(node, DirectoryNode):
            return node.listing.count
        return 0
    return sum(1 for _ in files_with_prefix(archive, prefix))


def server_info() -> dict[str, Any]:
    """What a DANDI client reads from ``/server-info`` and ``/api/info/``."""
    public = settings.PUBLIC_URL
    schema = settings.DANDIZARR_DANDI_SCHEMA_VERSION
    return {
        "version": settings.DANDIZARR_VERSION,
        "schema_version": schema,
        "schema_url": (
            f"https://raw.githubusercontent.com/dandi/schema/master/releases/{schema}/dandiset.json"
        ),
        "cli-minimal-version": settings.DANDIZARR_DANDI_CLI_MINIMAL_VERSION,
        "cli-bad-versions": [],
        "services": {
            "api": {"url": f"{public}/api"},
            "webui": {"url": public},
            "jupyterhub": {"url": public},
        },
    }
