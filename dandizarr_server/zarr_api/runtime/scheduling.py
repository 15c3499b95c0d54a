"""The one way services start background work: a Celery task by name, once the transaction
commits (Zulip's ``queue_event_on_commit``), so services never import the tasks module."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery import current_app
from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerOperationalError

from dandizarr_server.zarr_api.runtime.background import WORKER

if TYPE_CHECKING:
    from dandizarr_server.zarr_api.models import ZarrArchive

logger = logging.getLogger(__name__)

# Task names (``dandizarr_server.zarr_api.tasks``); the beat schedule in settings names tasks the
# same way.
APPLY_TREE_UPDATES = "dandizarr_server.zarr_api.tasks.apply_tree_updates"
COMPACT_SHARD = "dandizarr_server.zarr_api.tasks.compact_shard"
CONVERT_ARCHIVE = "dandizarr_server.zarr_api.tasks.convert_archive"
FINISH_UNEMBARGO = "dandizarr_server.zarr_api.tasks.finish_unembargo"
SYNC_PUBLIC_READS = "dandizarr_server.zarr_api.tasks.sync_public_reads"
END_LOST_WRITERS_BATCHES = "dandizarr_server.zarr_api.tasks.end_lost_writers_batches"
SETTLE_WRITE_SESSIONS = "dandizarr_server.zarr_api.tasks.settle_write_sessions"
PRUNE_FILE_HISTORY = "dandizarr_server.zarr_api.tasks.prune_file_history"

# Tasks whose loss the periodic ``resume_stalled_tree_updates`` repairs (it requeues the update
# of every archive with a batch pending too long): if the broker cannot take one, the change
# that scheduled it has committed all the same, so the request succeeds and beat sends it later.
RESUMED_BY_BEAT = frozenset({APPLY_TREE_UPDATES, FINISH_UNEMBARGO})


def schedule_on_commit(task_name: str, *args: int, countdown: float | None = None) -> None:
    """Send ``task_name(*args)`` once the current transaction commits (at once outside one),
    to run ``countdown`` seconds later when given (eager mode runs it at once; ``dandizarr
    serve`` runs it in its background thread, ``dandizarr_server.zarr_api.runtime.background``).

    Through a signature, so a task this process knows runs inline when the app is eager
    (``send_task`` would skip that and go to the broker).
    """
    options = {"countdown": countdown} if countdown is not None else {}
    signature = current_app.signature(task_name, args=args, **options)

    def send() -> None:
        if settings.DANDIZARR_TASKS_IN_BACKGROUND:
            WORKER.submit(task_name, args, countdown)
            return
        try:
            signature.delay()
        except BrokerOperationalError as error:
            if task_name not in RESUMED_BY_BEAT:
                raise
            logger.warning(
                "could not queue %s%r (the broker is unreachable: %s); the periodic resume "
                "task will queue it",
                task_name,
                args,
                error,
            )

    transaction.on_commit(send)


def tree_update_schedule(archive: ZarrArchive) -> None:
    """Apply the archive's pending batches in the background once this transaction commits."""
    schedule_on_commit(APPLY_TREE_UPDATES, archive.pk)
