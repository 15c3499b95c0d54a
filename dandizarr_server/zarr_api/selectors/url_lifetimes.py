"""Where presigned PUTs cannot be revoked (S3): until when an archive's upload URLs can still
change storage, and so when its versions can be made (the writes that record the URLs and
set each ended batch's reconciliation are services.url_lifetimes)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, Q
from django.utils import timezone

from dandizarr_server.zarr_api.models import Batch, ZarrArchive


def quiet_after(archive: ZarrArchive, now: datetime) -> datetime:
    """When (``now`` at the earliest) no upload URL issued for the archive so far can change
    storage any more."""
    if archive.upload_urls_valid_until is None:
        return now
    margin = timedelta(seconds=settings.DANDIZARR_RECONCILE_MARGIN_SECONDS)
    return max(archive.upload_urls_valid_until + margin, now)


def publish_possible_after(
    archives: Sequence[ZarrArchive], versioning_since: datetime
) -> datetime | None:
    """None when the archives' versions can be made now; else when they can.

    A version's bytes are the tree's, found among the objects storage kept. Storage kept
    nothing before ``versioning_since``: an upload URL issued before then may have replaced
    bytes the tree names, for good. Until every such URL has expired and its batch was
    reconciled (the tree then says what storage holds), publishing waits, as it did when
    publishing froze archives. Afterwards a replay only replaces objects storage keeps."""
    now = timezone.now()
    lifetime = timedelta(
        seconds=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
        + settings.DANDIZARR_RECONCILE_MARGIN_SECONDS
        + settings.DANDIZARR_RECONCILE_SWEEP_SECONDS
    )
    # URLs issued before then are those of batches started before then: still open, or ended
    # and not yet reconciled.
    issued_before = Batch.objects.filter(archive__in=archives, created__lt=versioning_since)
    if (
        versioning_since + lifetime < now
        or not issued_before.filter(
            Q(state=Batch.State.OPEN) | Q(reconcile_after__isnull=False)
        ).exists()
    ):
        return None
    times = [quiet_after(a, now) for a in archives]
    times = [t for t in times if t > now]
    latest = Batch.objects.filter(archive__in=archives, reconcile_after__isnull=False).aggregate(
        latest=Max("reconcile_after")
    )["latest"]
    if latest is not None:
        # A due reconciliation runs within the sweep's interval.
        sweep = timedelta(seconds=settings.DANDIZARR_RECONCILE_SWEEP_SECONDS)
        times.append(max(latest, now) + sweep)
    return max(times) if times else None
