"""Celery tasks: thin wrappers around services, idempotent and acknowledged late."""

from __future__ import annotations

import logging

from dandizarr.celery import app
from zarr_api import services

logger = logging.getLogger(__name__)


@app.task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=None,
)
def propagate_archive(archive_pk: int) -> str | None:
    """Apply the archive's pending batches to its .checksum tree (serialized per archive)."""
    summary = services.archive_propagate(archive_pk)
    return summary.digest if summary else None


@app.task(acks_late=True)
def cancel_stale_batches() -> int:
    return services.stale_batches_cancel()


@app.task(acks_late=True)
def resume_pending_propagation() -> int:
    """Requeue tree updates whose task was lost (a broker restart, a worker killed long ago)."""
    archive_pks = services.archives_with_stalled_propagation()
    for archive_pk in archive_pks:
        propagate_archive.delay(archive_pk)
    return len(archive_pks)
