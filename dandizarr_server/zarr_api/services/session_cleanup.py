"""What storage holds for ended write sessions (docs/writing.md): the sweep that ends sessions
whose writer is gone (expired), deletes what sessions without a commit staged, and, once a
commit's batch is applied, the loose objects of the paths it deleted (the tree no longer has
them; left, the audit would take them for files of the archive), and on a sharded archive its
chunk files packed into shards (``session_repacking``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from dandizarr_server.zarr_api.models import (
    Batch,
    SessionFile,
    WriteSession,
    ZarrArchive,
)
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_snapshot
from dandizarr_server.zarr_api.selectors.batch_states import loose_upload_paths
from dandizarr_server.zarr_api.services.session_repacking import session_batch_repack
from dandizarr_server.zarr_api.services.write_sessions import session_end, staged_objects_delete

logger = logging.getLogger(__name__)

_PATHS_PER_STEP = 2000


def write_sessions_sweep() -> int:
    """End open sessions past their expiry, and clean up after every ended one not cleaned
    yet; each session on its own (one that fails is logged and retried next time). Returns
    how many were cleaned."""
    expired = WriteSession.objects.filter(state=WriteSession.State.OPEN, expires__lt=timezone.now())
    for pk in list(expired.values_list("pk", flat=True)):
        with transaction.atomic():
            session = WriteSession.objects.select_for_update().get(pk=pk)
            if session.state == WriteSession.State.OPEN and session.expires < timezone.now():
                session_end(session, WriteSession.State.EXPIRED)
    cleaned = 0
    uncleaned = WriteSession.objects.filter(cleaned=False).exclude(state=WriteSession.State.OPEN)
    for pk, state, archive_pk in list(uncleaned.values_list("pk", "state", "archive_id")):
        try:
            if state == WriteSession.State.COMMITTED and _batch_failed(pk):
                # Its batch never applied (a big file's md5 did not prove): what it staged goes.
                staged_objects_delete(pk)
                cleaned += 1
            elif state == WriteSession.State.COMMITTED:
                cleaned += committed_sessions_settle(archive_pk)
            else:
                staged_objects_delete(pk)
                cleaned += 1
        except Exception:
            logger.exception("write session %s: cleanup failed; retried by the next sweep", pk)
    return cleaned


def _batch_failed(session_pk: int) -> bool:
    return WriteSession.objects.filter(
        pk=session_pk, batch__state__in=[Batch.State.FAILED, Batch.State.CANCELLED]
    ).exists()


def committed_sessions_settle(archive_pk: int) -> int:
    """For each committed session of the archive whose batch is applied: delete the loose
    objects of the paths it deleted that the tree still does not have (no later batch wrote
    them), then its rows. Idempotent; under the archive's row lock, as a batch start is, so
    no upload of those paths is admitted in between."""
    settled = 0
    sessions = WriteSession.objects.filter(
        archive_id=archive_pk,
        state=WriteSession.State.COMMITTED,
        cleaned=False,
        batch__state=Batch.State.APPLIED,
    )
    for pk, batch_pk in list(sessions.values_list("pk", "batch_id")):
        # On a sharded archive, its chunk files packed into shards first (a failure leaves
        # the session to the next sweep, which packs the rest).
        try:
            if batch_pk is not None:
                session_batch_repack(batch_pk)
        except Exception:
            logger.exception("write session %s: packing failed; retried by the next sweep", pk)
            continue
        deleted = list(
            SessionFile.objects.filter(session_id=pk, deleted=True).values_list("path", flat=True)
        )
        for start in range(0, len(deleted), _PATHS_PER_STEP):
            _loose_objects_delete(archive_pk, deleted[start : start + _PATHS_PER_STEP])
        with transaction.atomic():
            SessionFile.objects.filter(session_id=pk).delete()
            WriteSession.objects.filter(pk=pk).update(cleaned=True)
        settled += 1
    return settled


def _loose_objects_delete(archive_pk: int, paths: Sequence[str]) -> None:
    with transaction.atomic():
        archive = ZarrArchive.objects.select_for_update().get(pk=archive_pk)
        busy = loose_upload_paths(archive, paths)
        present = archive_snapshot(archive).files_state(paths)
        gone = [p for p in paths if present[p] is None and p not in busy]
        get_store().delete_many(archive.storage_prefix + p for p in gone)
