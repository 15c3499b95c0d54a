"""Publishing a dandiset: its draft copied into a read-only version, and every zarr archive in
it given an immutable archive version (docs/versions.md). Nothing is copied in storage: the
store keeps what the draft later replaces (object versioning), and FileHistory rows say where."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from dandizarr.objectstore import ObjectNotFound, ObjectStoreError
from dandizarr_server.zarr_api.domain.keys import VERSIONING_SINCE_KEY
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ServiceUnavailable, ValidationFailed
from dandizarr_server.zarr_api.models import (
    ArchiveVersion,
    Asset,
    Dandiset,
    Version,
    ZarrArchive,
)
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.batch_states import archives_with_changing_batches
from dandizarr_server.zarr_api.selectors.url_lifetimes import publish_possible_after


def ensure_storage_versioning() -> datetime:
    """Turn the bucket's object versioning on if it is off, and return since when it has been
    on, as recorded in the bucket itself (an object this writes when it turns versioning on or
    first sees it on). Versions need the store to keep replaced objects: on before the first
    one, published or a write session's snapshot (``manage.py ensure_bucket`` turns it on at
    deployment)."""
    store = get_store()
    try:
        if not store.versioning_enabled():
            store.enable_versioning()
        try:
            return datetime.fromisoformat(store.get(VERSIONING_SINCE_KEY).decode())
        except ObjectNotFound:
            now = timezone.now()
            store.put(VERSIONING_SINCE_KEY, now.isoformat().encode())
            return now
    except (ObjectStoreError, ValueError) as error:
        raise ServiceUnavailable(f"storage cannot keep object versions ({error})") from error


def version_publish(*, user: Requester, dandiset: Dandiset) -> Version:
    """Copy the draft into a new read-only version; each of its zarr archives gets a version
    (its tree as of its applied batches; an upload still open goes into the next one)."""
    require_writer(user, dandiset)
    versioning_since = ensure_storage_versioning()
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
        busy = archives_with_changing_batches(archives)
        if busy:
            raise Conflict(
                "cannot publish while checksums are pending or files are being deleted in zarr "
                f"archive(s) {', '.join(sorted(busy))}; try again shortly"
            )
        possible_after = publish_possible_after(archives, versioning_since)
        if possible_after is not None:
            raise Conflict(
                f"cannot publish before {possible_after:%Y-%m-%dT%H:%M:%SZ}: upload URLs issued "
                "before storage kept object versions may be used until then (storage cannot "
                "revoke them), and each ended batch's files are then checked against the "
                "checksum tree",
                publish_possible_after=possible_after.isoformat(),
            )
        version = Version.objects.create(dandiset=dandiset, version=next_version_name(dandiset))
        made = {archive.pk: archive_version_make(archive) for archive in archives}
        Asset.objects.bulk_create(
            Asset(
                version=version,
                path=a.path,
                zarr_id=a.zarr_id,
                archive_version=made[a.zarr_id],
                metadata=a.metadata,
            )
            for a in assets
        )
    return version


def next_version_name(dandiset: Dandiset) -> str:
    """The name of the dandiset's next published version, as the DANDI Archive names them:
    ``0.YYMMDD.HHMM`` (UTC), the next free minute when that one is taken. Every DANDI client
    parses a published version as three dot-separated numbers (a fourth part, as in
    ``0.YYMMDD.HHMMSS.1``, it cannot). The caller holds the dandiset's row lock."""
    taken = set(Version.objects.filter(dandiset=dandiset).values_list("version", flat=True))
    moment = timezone.now()
    while (name := f"0.{moment:%y%m%d.%H%M}") in taken:
        moment += timedelta(minutes=1)
    return name


def archive_version_make(archive: ZarrArchive) -> ArchiveVersion:
    """The archive's draft, as applied, becomes its next version; the draft goes on in a new
    generation. O(1): nothing is read or written per file. The caller holds the row lock."""
    published = ArchiveVersion.objects.filter(archive=archive, kind=ArchiveVersion.Kind.PUBLISHED)
    last = published.aggregate(n=Max("number"))["n"]
    made = ArchiveVersion.objects.create(
        archive=archive,
        number=(last or 0) + 1,
        generation=archive.generation,
        checksum=archive.checksum,
        file_count=archive.file_count,
        size=archive.size,
    )
    archive.generation += 1
    archive.published_versions += 1
    ZarrArchive.objects.filter(pk=archive.pk).update(
        generation=archive.generation, published_versions=archive.published_versions
    )
    return made
