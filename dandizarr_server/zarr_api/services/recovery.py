"""Finishing what a crash left unfinished: cancels and deletions whose intent committed but
whose storage work or state change did not (the periodic sweep), and, for the embedded server
that has no Celery beat, everything the periodic tasks would do, once at start."""

from __future__ import annotations

import logging

from dandizarr_server.zarr_api.models import Batch
from dandizarr_server.zarr_api.selectors.lookups import archives_with_stalled_tree_updates
from dandizarr_server.zarr_api.services.batch_endings import BATCH_END_FINISHERS
from dandizarr_server.zarr_api.services.embargo import unfinished_releases_finish
from dandizarr_server.zarr_api.services.reconciliation import due_batches_reconcile
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply

logger = logging.getLogger(__name__)


def unfinished_batch_ends_finish() -> int:
    """Finish every cancel and deletion in progress (idempotent: one a request is finishing
    right now is waited for under the archive's lock, then left alone); a failing archive does
    not stop the others."""
    finished = 0
    unfinished = Batch.objects.filter(state__in=list(BATCH_END_FINISHERS)).order_by("pk")
    for batch_pk, state in unfinished.values_list("pk", "state"):
        try:
            BATCH_END_FINISHERS[Batch.State(state)](batch_pk)
        except Exception:
            logger.exception("finishing the %s of batch %s failed; retried later", state, batch_pk)
            continue
        finished += 1
    return finished


def recover_at_start() -> None:
    """The embedded server's start: nothing else runs, so nothing pending is in progress."""
    unfinished_batch_ends_finish()
    unfinished_releases_finish()
    for archive_pk in archives_with_stalled_tree_updates(older_than_seconds=0):
        tree_update_apply(archive_pk)
    due_batches_reconcile()
    write_sessions_sweep()
