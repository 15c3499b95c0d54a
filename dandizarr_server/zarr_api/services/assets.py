"""Assets of a dandiset's draft: adding a zarr archive at a path, changing and removing it."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer, user_can_read
from dandizarr_server.zarr_api.edge.exceptions import Conflict, Forbidden, ValidationFailed
from dandizarr_server.zarr_api.models import Asset, Dandiset, Version, ZarrArchive
from dandizarr_server.zarr_api.parsers.identifiers import parse_zarr_id


def asset_create(
    *, user: Requester, dandiset: Dandiset, path: str, zarr_id: str, metadata: dict[str, Any]
) -> Asset:
    require_writer(user, dandiset)
    parsed = parse_zarr_id(zarr_id)
    archive = (
        ZarrArchive.objects.select_related("dandiset").filter(zarr_id=parsed).first()
        if parsed
        else None
    )
    # An archive the user may not read is absent (the one rule, permissions.py): the very
    # answer a missing id gets, or the refusal would confirm that a private archive exists and
    # name the embargoed dandiset holding it.
    if archive is None or not user_can_read(user, archive.dandiset):
        raise ValidationFailed(
            f"no zarr archive with zarr_id {zarr_id}", code="zarr_archive_not_found"
        )
    if archive.dandiset_id != dandiset.pk:
        raise ValidationFailed(
            f"zarr archive {zarr_id} belongs to dandiset {archive.dandiset.identifier}, "
            f"not {dandiset.identifier}",
            code="zarr_archive_in_another_dandiset",
        )
    draft = Version.objects.get(dandiset=dandiset, version=Version.DRAFT)
    try:
        with transaction.atomic():
            return Asset.objects.create(version=draft, path=path, zarr=archive, metadata=metadata)
    except IntegrityError as error:
        raise Conflict(
            f"the draft of {dandiset.identifier} already has an asset at {path!r}",
            code="asset_exists",
        ) from error


def _require_draft_writer(user: Requester, asset: Asset) -> None:
    if not asset.version.is_draft:
        raise Forbidden("assets of a published version are read-only")
    require_writer(user, asset.version.dandiset)


def asset_update(
    *, user: Requester, asset: Asset, path: str | None, metadata: dict[str, Any] | None
) -> Asset:
    _require_draft_writer(user, asset)
    if path is not None:
        asset.path = path
    if metadata is not None:
        asset.metadata = metadata
    try:
        with transaction.atomic():
            asset.save()
    except IntegrityError as error:
        raise Conflict(
            f"the draft already has an asset at {path!r}", code="asset_exists"
        ) from error
    return asset


def asset_delete(*, user: Requester, asset: Asset) -> None:
    _require_draft_writer(user, asset)
    asset.delete()
