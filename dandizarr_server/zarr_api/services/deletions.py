"""Deleting files of an archive: a deletion batch, applied to the tree like any other.

The intent commits first (the batch, state ``deleting``), then storage is acted on, then the
batch becomes pending for its tree update; a crash at any step leaves a batch the periodic
sweep finishes (``deletion_finish`` is idempotent), so tree and storage converge on their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, NotFound
from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.selectors.archive_contents import archive_snapshot
from dandizarr_server.zarr_api.selectors.batch_states import has_open_batch
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
)
from dandizarr_server.zarr_api.services.batch_endings import (
    batch_endings_settle,
    deletion_finish,
    deletion_intent,
)


def files_delete(*, user: Requester, archive: ZarrArchive, paths: Sequence[str]) -> Batch:
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        if has_open_batch(archive):
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload batch in progress; complete or "
                "cancel it before deleting files",
                code="open_batch_exists",
            )
        batch_endings_settle(archive)
        state = archive_snapshot(archive).files_state(paths)
        missing = [p for p in paths if state[p] is None]
        if missing:
            raise NotFound(
                f"{len(missing)} of the paths are not in zarr archive {archive.zarr_id}, so "
                f"nothing was deleted: {', '.join(repr(p) for p in missing[:5])}",
                missing=missing,
            )
        deletion = deletion_intent(archive, user, paths, note="deleted by request")
    crash_point("delete:intent-committed")
    return deletion_finish(deletion.pk)
