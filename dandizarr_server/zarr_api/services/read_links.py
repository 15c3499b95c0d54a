"""Making and revoking private read links (docs/embargo.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user
from dandizarr_server.zarr_api.domain.read_links import new_secret, secret_hash
from dandizarr_server.zarr_api.edge.exceptions import Conflict, NotFound
from dandizarr_server.zarr_api.models import ArchiveVersion, ReadLink, ZarrArchive


@dataclass(frozen=True)
class MadeLink:
    link: ReadLink
    # Returned once, to its maker; never stored.
    secret: str


def read_link_create(
    archive: ZarrArchive,
    requester: Requester | None,
    expires_in: int,
    version: ArchiveVersion | None,
) -> MadeLink:
    """A new link to ``archive`` (or ``version``), alive ``expires_in`` seconds. The caller has
    checked that ``requester`` owns it; Conflict past the live-link limit."""
    now = timezone.now()
    secret = new_secret()
    digest = secret_hash(secret)
    assert digest is not None
    with transaction.atomic():
        # The archive's row serialises concurrent creations against the limit.
        ZarrArchive.objects.select_for_update().filter(pk=archive.pk).first()
        live = ReadLink.objects.filter(archive=archive, revoked=None, expires__gt=now).count()
        if live >= settings.DANDIZARR_READ_LINK_LIMIT:
            raise Conflict(
                f"zarr archive {archive.zarr_id} has {live} live read links, the most allowed: "
                "revoke one first",
                code="read_link_limit",
            )
        link = ReadLink.objects.create(
            archive=archive,
            version=version,
            secret_sha256=digest,
            created_by=recorded_user(requester),
            expires=now + timedelta(seconds=expires_in),
        )
    return MadeLink(link, secret)


def read_link_revoke(archive: ZarrArchive, link_id: str, when: datetime | None = None) -> None:
    """Revoke the archive's link ``link_id`` (again is a no-op); NotFound for another's."""
    try:
        pk = int(link_id)
    except ValueError:
        pk = -1
    updated = ReadLink.objects.filter(archive=archive, pk=pk).update(revoked=when or timezone.now())
    if not updated:
        raise NotFound(f"zarr archive {archive.zarr_id} has no read link {link_id[:40]!r}")
