"""Celery tasks: thin wrappers around services, idempotent and acknowledged late."""

from __future__ import annotations

import logging
from typing import Any

from dandizarr.celery import app
from zarr_api import services, shards

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


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=10)
def pack_archive(self: Any, archive_pk: int) -> int:
    """Convert a loose archive's chunk files into shards; a rerun continues where it stopped."""
    try:
        return shards.archive_pack_run(archive_pk).files_packed
    except Exception as error:
        if self.request.retries >= self.max_retries:
            # Give the archive back to its users; what was packed stays packed, and another
            # POST pack/ continues from there.
            shards.pack_abandon(archive_pk, error)
            raise
        raise self.retry(exc=error, countdown=min(300, 2**self.request.retries)) from error


@app.task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=10,
)
def compact_shard(shard_pk: int) -> bool:
    """Rewrite a shard whose dead share passed the threshold with its live members only."""
    return shards.shard_compact(shard_pk)
