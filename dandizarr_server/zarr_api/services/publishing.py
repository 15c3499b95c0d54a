"""Publishing a dandiset: its draft copied into a read-only version, its archives frozen."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import (
    BUSY_STATES,
    Asset,
    Batch,
    Dandiset,
    Version,
    ZarrArchive,
)
from dandizarr_server.zarr_api.permissions import Requester, require_writer
from dandizarr_server.zarr_api.services.url_lifetimes import publish_possible_after


def version_publish(*, user: Requester, dandiset: Dandiset) -> Version:
    """Copy the draft into a new read-only version; its zarr archives become frozen."""
    require_writer(user, dandiset)
    with transaction.atomic():
        dandiset = Dandiset.objects.select_for_update().get(pk=dandiset.pk)
        draft = Version.objects.get(dandiset=dandiset, version=Version.DRAFT)
        assets = list(draft.assets.all())
        if not assets:
            raise ValidationFailed(f"the draft of dandiset {dandiset.identifier} has no assets")
        archive_pks = sorted({a.zarr_id for a in assets})
        archives = list(
            ZarrArchive.objects.select_for_update().filter(pk__in=archive_pks).order_by("pk")
        )
        busy = Batch.objects.filter(archive__in=archives, state__in=BUSY_STATES).values_list(
            "archive__zarr_id", flat=True
        )
        if busy:
            raise Conflict(
                "cannot publish while an upload is in progress or checksums are pending for "
                f"zarr archive(s) {', '.join(str(z) for z in sorted(set(busy)))}"
            )
        possible_after = publish_possible_after(archives)
        if possible_after is not None:
            raise Conflict(
                f"cannot publish before {possible_after:%Y-%m-%dT%H:%M:%SZ}: upload URLs issued "
                "for its zarr archive(s) may be used until then (storage cannot revoke them), "
                "and each ended batch's files are then checked against the checksum tree",
                publish_possible_after=possible_after.isoformat(),
            )
        now = timezone.now()
        name = f"0.{now:%y%m%d.%H%M%S}"
        suffix = 0
        while Version.objects.filter(dandiset=dandiset, version=name).exists():
            suffix += 1
            name = f"0.{now:%y%m%d.%H%M%S}.{suffix}"
        version = Version.objects.create(dandiset=dandiset, version=name)
        Asset.objects.bulk_create(
            Asset(version=version, path=a.path, zarr_id=a.zarr_id, metadata=a.metadata)
            for a in assets
        )
        ZarrArchive.objects.filter(pk__in=archive_pks).update(frozen=True, modified=now)
    return version
