"""Resetting an archive's draft to one of its versions (docs/versions.md).

Every path that differs between the version and the draft goes back to its state in the
version, through batches the tree update applies like any other (so what the reset replaces is
recorded for later versions, and the checksum stays exact): a deletion for paths the version did
not have (their objects deleted, as a user's deletion deletes them), an upload of paths whose
bytes are a loose object, a pack batch of paths whose bytes
are a range of a shard object. No byte passes through the service: a loose object's kept
version is made current again (on S3 by removing the delete markers above it, or else a copy
inside storage; locally a hard link), a shard object the draft discarded likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from dandizarr.objectstore import ObjectStoreError
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.domain.permissions import Requester, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ServiceUnavailable
from dandizarr_server.zarr_api.models import (
    ArchiveVersion,
    Batch,
    BatchFile,
    Shard,
    ZarrArchive,
)
from dandizarr_server.zarr_api.runtime.scheduling import tree_update_schedule
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_versions import version_changes
from dandizarr_server.zarr_api.selectors.batch_states import has_changing_batches, has_open_batch
from dandizarr_server.zarr_api.selectors.pending_batches import next_sequence
from dandizarr_server.zarr_api.selectors.shard_members import MemberLocation
from dandizarr_server.zarr_api.selectors.version_trees import version_tree
from dandizarr_server.zarr_api.services.archive_locks import (
    lock_archive,
    require_not_converting,
)
from dandizarr_server.zarr_api.services.batch_endings import (
    batch_endings_settle,
    deletion_finish,
    deletion_intent,
)
from dandizarr_server.zarr_api.services.bulk_rows import batch_files_insert


def draft_reset(*, user: Requester, archive: ZarrArchive, version: ArchiveVersion) -> list[Batch]:
    """Make the draft what ``version`` is; the batches that do it (applied in the background:
    the archive's checksum_status says when, and its checksum is then the version's)."""
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        require_not_converting(archive)
        if has_open_batch(archive):
            raise Conflict(
                f"zarr archive {archive.zarr_id} has an upload batch in progress; complete or "
                "cancel it before resetting the draft",
                code="open_batch_exists",
            )
        batch_endings_settle(archive)
        if has_changing_batches(archive):
            raise Conflict(
                f"zarr archive {archive.zarr_id} has checksum updates pending; reset once its "
                "checksum_status is complete",
                code="batch_pending",
            )
        changes = version_changes(archive, version, None)
        tree = version_tree(archive, version)
        removed = [c.path for c in changes if c.before is None]
        loose: list[tuple[str, str, int, MemberLocation]] = []
        packed: list[tuple[str, str, int, MemberLocation]] = []
        for change in changes:
            if (state := change.before) is None:
                continue
            where = tree.locate(change.path, state.md5, state.size)
            is_loose = where.key == file_key(archive.zarr_id, change.path)
            (loose if is_loose else packed).append((change.path, state.md5, state.size, where))
        shards = {s.key: s for s in Shard.objects.filter(key__in={w.key for *_, w in packed})}
        _restore_objects([w for *_, w in loose + packed])
        now = timezone.now()
        made = []
        # Removed as a user's deletion is: their objects deleted too (deletion_finish, after
        # the commit), or the draft's storage would keep files its tree no longer lists (a
        # reconciliation would then bring them back, taking storage for the truth).
        deletion = (
            deletion_intent(
                archive, user, removed, note=f"reset of the draft to version {version.number}"
            )
            if removed
            else None
        )
        if loose:
            made.append(_pending_batch_create(archive, Batch.Kind.UPLOAD, now, version))
            batch_files_insert(made[-1].pk, ((p, md5, size) for p, md5, size, _ in loose))
        if packed:
            made.append(_pending_batch_create(archive, Batch.Kind.PACK, now, version))
            BatchFile.objects.bulk_create(
                BatchFile(
                    batch=made[-1],
                    path=path,
                    md5=md5,
                    size=size,
                    shard=shards[where.key],
                    offset=where.offset,
                )
                for path, md5, size, where in packed
            )
        if made:
            tree_update_schedule(archive)
    if deletion is not None:
        made.insert(0, deletion_finish(deletion.pk))
    return made


def _pending_batch_create(
    archive: ZarrArchive, kind: str, now: datetime, version: ArchiveVersion
) -> Batch:
    return Batch.objects.create(
        archive=archive,
        kind=kind,
        state=Batch.State.PENDING,
        sequence=next_sequence(archive),
        completed=now,
        note=f"reset of the draft to version {version.number}",
    )


def _restore_objects(locations: Sequence[MemberLocation]) -> None:
    """Make each location's object version current (kept versions only; current ones stay)."""
    store = get_store()
    wanted = {(w.key, w.version_id) for w in locations if w.version_id is not None}
    try:
        for key, version_id in sorted(wanted):
            assert version_id is not None
            store.restore_version(key, version_id)
    except ObjectStoreError as error:
        raise ServiceUnavailable(f"storage could not restore an object: {error}") from error
