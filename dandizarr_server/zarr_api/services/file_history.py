"""What the draft's changes replace, recorded for the archive's versions (FileHistory).

A tree update calls ``replaced_files_record`` before it applies its batches: the rows are facts
about the past ("up to generation g, this path was X"), so they are committed first, before any
listing the batches change is written. A reader of a version that then sees a changed draft
listing already sees the row that undoes the change (dandizarr_server.zarr_api.selectors
.version_trees); a crash after the rows and before the apply leaves rows that are still true.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from dandizarr.checksums import FileState
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.models import FileHistory, TreeLock, ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_contents import (
    ArchiveSnapshot,
    pending_changes,
)
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached
from dandizarr_server.zarr_api.selectors.pending_batches import applicable_batch_ids
from dandizarr_server.zarr_api.selectors.shard_members import (
    member_locations,
)
from dandizarr_server.zarr_api.services.archive_locks import lock_tree

_CHUNK = 2000


def replaced_files_record(archive_pk: int) -> set[int]:
    """Record what the applicable batches replace, and commit: the batch ids an update may
    apply after it (every applicable one of an archive without versions: nothing to keep)."""
    with transaction.atomic():
        try:
            lock_tree(archive_pk)
        except TreeLock.DoesNotExist:
            return set()
        archive = ZarrArchive.objects.get(pk=archive_pk)
        batch_ids = applicable_batch_ids(archive)
        if archive.generation > 1 and batch_ids:
            replaced_record(archive, pending_changes(archive, batch_ids))
    return set(batch_ids)


def replaced_record(archive: ZarrArchive, changes: Mapping[str, FileState | None]) -> int:
    """Rows for each changed path whose state at the last published generation differs from
    its new one, unless this generation already recorded it. The caller holds the TreeLock."""
    until = archive.generation - 1
    recorded = 0
    paths = list(changes)
    snapshot = ArchiveSnapshot(draft_tree_cached(archive), {})
    for start in range(0, len(paths), _CHUNK):
        chunk = paths[start : start + _CHUNK]
        done = set(
            FileHistory.objects.filter(archive=archive, until_generation=until, path__in=chunk)
            .order_by()  # a set of paths: no "ORDER BY id" for the database to honour
            .values_list("path", flat=True)
        )
        todo = [p for p in chunk if p not in done]
        before = snapshot.files_state(todo)
        changed = [p for p in todo if before[p] != changes[p]]
        members = member_locations(archive, [p for p in changed if before[p] is not None])
        rows = []
        for path in changed:
            old = before[path]
            if old is None:
                rows.append(
                    FileHistory(archive=archive, path=path, until_generation=until, present=False)
                )
                continue
            member = members.get(path)
            rows.append(
                FileHistory(
                    archive=archive,
                    path=path,
                    until_generation=until,
                    present=True,
                    md5=old.md5,
                    size=old.size,
                    key=member.key if member else file_key(archive.zarr_id, path),
                    offset=member.offset if member else None,
                )
            )
        FileHistory.objects.bulk_create(rows, ignore_conflicts=True)
        recorded += len(rows)
    return recorded
