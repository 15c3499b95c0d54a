"""Private (embargoed) dandisets: created private, released by their owners.

Releasing copies nothing and uploads nothing: the dandiset becomes ``UNEMBARGOING`` (still
private), the storage side of the release runs after the commit (``embargo_release_finish``,
a task; the periodic sweep finishes any release a crash interrupted), then it is ``OPEN``.

The storage side: where the bucket serves public data without signatures
(``DANDIZARR_S3_PUBLIC_READ_URL``), the bucket policy grants anonymous reads on the key
prefixes of the archives of open dandisets, and of no others (``public_reads_sync``); a
private archive's objects are read with a signature only. Without a public bucket there is
nothing to change in storage. docs/embargo.md.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from dandizarr.objectstore.public_reads import public_read_prefixes_set
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.domain.keys import checksums_prefix, files_prefix, shards_prefix
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict
from dandizarr_server.zarr_api.models import Dandiset, ZarrArchive
from dandizarr_server.zarr_api.runtime.scheduling import (
    FINISH_UNEMBARGO,
    SYNC_PUBLIC_READS,
    schedule_on_commit,
)
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.batch_states import open_batches_of_dandiset

logger = logging.getLogger(__name__)


def embargo_release(*, user: Requester, dandiset: Dandiset) -> Dandiset:
    """Start releasing ``dandiset``: 409 when it is not embargoed, or while an upload into one
    of its archives is open (its URLs were handed out as private)."""
    require_writer(user, dandiset)
    with transaction.atomic():
        locked = Dandiset.objects.select_for_update().get(pk=dandiset.pk)
        if locked.embargo_status != Dandiset.EmbargoStatus.EMBARGOED:
            raise Conflict(
                f"dandiset {locked.identifier} is not embargoed ({locked.embargo_status})",
                code="dandiset_not_embargoed",
            )
        open_upload = open_batches_of_dandiset(locked).select_related("archive").first()
        if open_upload is not None:
            raise Conflict(
                f"dandiset {locked.identifier} has an upload in progress in zarr archive "
                f"{open_upload.archive.zarr_id}: complete or cancel it, then release",
                code="open_batch_exists",
            )
        locked.embargo_status = Dandiset.EmbargoStatus.UNEMBARGOING
        locked.save(update_fields=["embargo_status"])
        schedule_on_commit(FINISH_UNEMBARGO, locked.pk)
    return locked


def embargo_release_finish(dandiset_pk: int) -> bool:
    """The storage side of a release, then ``OPEN``; idempotent (False: nothing to finish)."""
    if not Dandiset.objects.filter(
        pk=dandiset_pk, embargo_status=Dandiset.EmbargoStatus.UNEMBARGOING
    ).exists():
        return False
    # Storage first: were the process to die after it, the sweep would do it again; the
    # dandiset is never OPEN while storage still keeps it private.
    public_reads_sync(also_open=[dandiset_pk])
    updated = Dandiset.objects.filter(
        pk=dandiset_pk, embargo_status=Dandiset.EmbargoStatus.UNEMBARGOING
    ).update(embargo_status=Dandiset.EmbargoStatus.OPEN)
    logger.info("dandiset %s released from embargo", dandiset_pk)
    return bool(updated)


def unfinished_releases_finish() -> int:
    """Finish every release a crash interrupted (the periodic sweep, and at start)."""
    pending = Dandiset.objects.filter(embargo_status=Dandiset.EmbargoStatus.UNEMBARGOING)
    return sum(embargo_release_finish(pk) for pk in pending.values_list("pk", flat=True))


def public_reads_schedule() -> None:
    """Bring the public part of the bucket up to date after this transaction (a new archive)."""
    if settings.DANDIZARR_S3_PUBLIC_READ_URL:
        schedule_on_commit(SYNC_PUBLIC_READS)


def public_reads_sync(*, also_open: list[int] | None = None) -> int:
    """Grant anonymous reads on the archives of open dandisets (and of ``also_open``, being
    released) and on nothing else; a no-op without a public bucket. Returns the prefixes."""
    store = get_store()
    if not settings.DANDIZARR_S3_PUBLIC_READ_URL or not isinstance(store, S3ObjectStore):
        return 0
    archives = ZarrArchive.objects.filter(
        dandiset__embargo_status=Dandiset.EmbargoStatus.OPEN
    ) | ZarrArchive.objects.filter(dandiset_id__in=also_open or [])
    prefixes = [
        make(zarr_id)
        for zarr_id in archives.values_list("zarr_id", flat=True)
        for make in (files_prefix, checksums_prefix, shards_prefix)
    ]
    public_read_prefixes_set(store, prefixes)
    return len(prefixes)
