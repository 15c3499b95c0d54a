"""Celery tasks: thin wrappers around services, idempotent and acknowledged late.

Services schedule these by name through ``zarr_api.runtime.scheduling``; the names are
``dandizarr_server.zarr_api.tasks.<function>`` (the beat schedule in settings uses them too).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Task, shared_task
from django.conf import settings

from dandizarr_server.zarr_api.runtime.scheduling import APPLY_TREE_UPDATES, schedule_on_commit
from dandizarr_server.zarr_api.selectors.lookups import archives_with_stalled_tree_updates
from dandizarr_server.zarr_api.services.compaction import shard_compact
from dandizarr_server.zarr_api.services.conversion import (
    archive_conversion_abandon,
    archive_conversion_run,
)
from dandizarr_server.zarr_api.services.embargo import (
    embargo_release_finish,
    public_reads_sync,
    unfinished_releases_finish,
)
from dandizarr_server.zarr_api.services.file_history import history_prune
from dandizarr_server.zarr_api.services.garbage import garbage_collect_all
from dandizarr_server.zarr_api.services.lost_writers import lost_writers_batches_end
from dandizarr_server.zarr_api.services.multipart_uploads import abandoned_uploads_abort
from dandizarr_server.zarr_api.services.reconciliation import due_batches_reconcile
from dandizarr_server.zarr_api.services.recovery import unfinished_batch_ends_finish
from dandizarr_server.zarr_api.services.session_cleanup import (
    committed_sessions_settle,
    write_sessions_sweep,
)
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply
from dandizarr_server.zarr_api.services.upload_batches import stale_batches_cancel

# Idempotent tasks: redelivered if their worker dies, retried with backoff on any error.
RETRIED_ON_ANY_ERROR: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (Exception,),
    "retry_backoff": True,
}


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=60, max_retries=None)
def apply_tree_updates(archive_pk: int) -> str | None:
    """Apply the archive's pending batches to its .checksum tree (serialized per archive)."""
    summary = tree_update_apply(archive_pk)
    return summary.digest if summary else None


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=60, max_retries=10)
def settle_write_sessions(archive_pk: int) -> int:
    """After a tree update applied committed write sessions: their deleted paths' loose
    objects deleted (the sweep does what a lost task left)."""
    return committed_sessions_settle(archive_pk)


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=60, max_retries=10)
def prune_file_history(archive_pk: int, since_generation: int) -> int:
    """After a write session's snapshot went: the history rows no version reads any more."""
    return history_prune(archive_pk, since_generation)


@shared_task(acks_late=True)
def sweep_write_sessions() -> int:
    """End write sessions whose writer is gone; clean up after ended ones."""
    return write_sessions_sweep()


@shared_task(acks_late=True)
def collect_storage_garbage() -> int:
    """Delete unreferenced object versions past the undelete window (services.garbage)."""
    return sum(r.reclaimed_objects for r in garbage_collect_all())


@shared_task(acks_late=True)
def cancel_stale_batches() -> int:
    """Cancel stale batches, then abort the multipart uploads no open batch is sending."""
    cancelled = stale_batches_cancel()
    margin = timedelta(seconds=settings.DANDIZARR_RECONCILE_MARGIN_SECONDS)
    return cancelled + abandoned_uploads_abort(margin)


@shared_task(acks_late=True)
def finish_batch_ends() -> int:
    """Finish cancels and deletions a crash interrupted (their intent is committed)."""
    return unfinished_batch_ends_finish()


@shared_task(acks_late=True)
def reconcile_due_batches() -> int:
    """Reconcile batches whose task was lost or deferred."""
    return due_batches_reconcile()


@shared_task(acks_late=True)
def resume_stalled_tree_updates() -> int:
    """Requeue tree updates whose task was lost (a broker restart, a worker killed long ago)."""
    archive_pks = archives_with_stalled_tree_updates(settings.DANDIZARR_STALLED_UPDATE_SECONDS)
    for archive_pk in archive_pks:
        schedule_on_commit(APPLY_TREE_UPDATES, archive_pk)
    return len(archive_pks)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=10)
def convert_archive(self: Task[[int], int], archive_pk: int) -> int:
    """Convert a loose archive's chunk files into shards; a rerun continues where it stopped."""
    try:
        return archive_conversion_run(archive_pk).files_packed
    except Exception as error:
        if self.request.retries >= self.max_retries:
            # Give the archive back to its users; what was packed stays packed, and another
            # POST pack/ continues from there.
            archive_conversion_abandon(archive_pk, error)
            raise
        raise self.retry(exc=error, countdown=min(300, 2**self.request.retries)) from error


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=300, max_retries=10)
def compact_shard(shard_pk: int) -> bool:
    """Rewrite a shard whose dead share passed the threshold with its live members only."""
    return shard_compact(shard_pk)


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=300, max_retries=None)
def finish_unembargo(dandiset_pk: int) -> bool:
    """The storage side of releasing a dandiset from embargo, then OPEN."""
    return embargo_release_finish(dandiset_pk)


@shared_task(acks_late=True)
def finish_unembargoes() -> int:
    """The periodic sweep: releases a crash interrupted."""
    return unfinished_releases_finish()


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=300, max_retries=10)
def sync_public_reads() -> int:
    """Grant anonymous reads on open archives only (a public bucket)."""
    return public_reads_sync()


@shared_task(**RETRIED_ON_ANY_ERROR, retry_backoff_max=300, max_retries=10)
def end_lost_writers_batches(dandiset_pk: int, *user_pks: int) -> int:
    """Cancel the open batches of users who can no longer write to the dandiset."""
    return lost_writers_batches_end(dandiset_pk, *user_pks)
