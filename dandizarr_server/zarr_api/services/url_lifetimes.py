"""Where presigned PUTs cannot be revoked (S3): recorded, how long an archive's upload URLs stay
usable, and when each ended batch's keys are to be reconciled with storage (docs/architecture.md,
"How the tree hash stays exact"; what follows from them is read in selectors.url_lifetimes). On
the local backend the storage endpoint refuses ended batches' URLs, so there is nothing to wait
for."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import presigned_puts_revocable
from dandizarr_server.zarr_api.selectors.url_lifetimes import quiet_after


def upload_urls_issued(archive: ZarrArchive) -> None:
    """Record that upload URLs for the archive (row locked) are being issued now."""
    if presigned_puts_revocable():
        return
    until = timezone.now() + timedelta(seconds=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS)
    if archive.upload_urls_valid_until is None or archive.upload_urls_valid_until < until:
        archive.upload_urls_valid_until = until
        ZarrArchive.objects.filter(pk=archive.pk).update(upload_urls_valid_until=until)


def reconcile_when_urls_expire(archive: ZarrArchive, batch: Batch) -> None:
    """A batch ended (archive row locked): set its ``reconcile_after`` (the caller saves it).
    The periodic sweep reconciles it once that has passed. No task is queued with a countdown:
    on Redis a message held past the broker's visibility timeout is delivered again and again,
    and the sweep alone is as prompt (every DANDIZARR_RECONCILE_SWEEP_SECONDS) and loses nothing."""
    if presigned_puts_revocable():
        return
    batch.reconcile_after = quiet_after(archive, timezone.now())
