"""Reading through a private read link (docs/embargo.md): the link's row is read on every
request, so a revocation or expiry made by any process is seen by every other at once."""

from __future__ import annotations

from django.utils import timezone

from dandizarr_server.zarr_api.domain.read_links import secret_hash
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import ReadLink, ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_rows import archive_row


def archive_by_link(secret: str) -> ZarrArchive:
    """The archive (as of the link's version) a live link opens; NotFound otherwise, the same
    for a link that never was, expired or was revoked (the detail never echoes the secret)."""
    digest = secret_hash(secret)
    link = (
        ReadLink.objects.filter(secret_sha256=digest, revoked=None, expires__gt=timezone.now())
        .select_related("version")
        .first()
        if digest is not None
        else None
    )
    archive = archive_row("pk", link.archive_id) if link is not None else None
    if link is None or archive is None:
        raise NotFound("no such read link (it may have expired or been revoked)")
    archive.as_of = link.version
    archive.through_link = True
    return archive


def read_links(archive: ZarrArchive) -> list[ReadLink]:
    """The archive's live links, newest first."""
    return list(
        ReadLink.objects.filter(archive=archive, revoked=None, expires__gt=timezone.now())
        .select_related("version")
        .order_by("-pk")
    )
