"""What the draft's changes replace, recorded for the archive's versions (FileHistory).

A tree update calls ``replaced_files_record`` before it applies its batches: the rows are facts
about the past ("up to generation g, this path was X"), so they are committed first, before any
listing the batches change is written. A reader of a version that then sees a changed draft
listing already sees the row that undoes the change (dandizarr_server.zarr_api.selectors
.version_trees); a crash after the rows and before the apply leaves rows that are still true.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from django.db import transaction

from dandizarr.checksums import FileState
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.models import ArchiveVersion, FileHistory, TreeLock, ZarrArchive
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


def history_needed(archive: ZarrArchive) -> bool:
    """Whether a change of the draft must record what it replaces: while any version (a
    published one, or an open write session's snapshot) may read it."""
    return ArchiveVersion.objects.filter(archive=archive).exists()


def replaced_files_record(archive_pk: int) -> tuple[set[int], int]:
    """Record what the applicable batches replace, and commit: the batch ids an update may
    apply after it (every applicable one of an archive without versions: nothing to keep),
    and the generation they were recorded for. An update that finds the archive in another
    generation (a session began meanwhile, with a snapshot of its own) records again."""
    with transaction.atomic():
        try:
            lock_tree(archive_pk)
        except TreeLock.DoesNotExist:
            return set(), 0
        archive = ZarrArchive.objects.get(pk=archive_pk)
        batch_ids = applicable_batch_ids(archive)
        if batch_ids and history_needed(archive):
            replaced_record(archive, pending_changes(archive, batch_ids))
    return set(batch_ids), archive.generation


def history_prune(archive_pk: int, since_generation: int) -> int:
    """Delete the FileHistory rows of generations ``since_generation`` on that no version of the
    archive reads any more (a session's snapshot went), so that garbage collection may take the
    objects only they kept; how many. A row (path, until u) is read by a version of generation
    g <= u whose path has no row between g and u: by a version after the path's previous row.
    Proportional to the rows since that generation; under the TreeLock (no update records
    meanwhile)."""
    pruned = 0
    with transaction.atomic():
        try:
            lock_tree(archive_pk)
        except TreeLock.DoesNotExist:
            return 0
        generations = sorted(
            ArchiveVersion.objects.filter(archive_id=archive_pk).values_list(
                "generation", flat=True
            )
        )
        since = FileHistory.objects.filter(
            archive_id=archive_pk, until_generation__gte=since_generation
        )
        paths = since.order_by("path").values_list("path", flat=True).distinct()
        last = None
        while True:
            # Keyset pages: the rows deleted take their paths out of ``since``.
            page = paths if last is None else paths.filter(path__gt=last)
            chunk = list(page[:_CHUNK])
            if not chunk:
                break
            last = chunk[-1]
            rows = (
                FileHistory.objects.filter(archive_id=archive_pk, path__in=chunk)
                .order_by("path", "until_generation")
                .values_list("pk", "path", "until_generation")
            )
            unread: list[int] = []
            previous: tuple[str, int] | None = None
            for pk, path, until in rows:
                after = previous[1] if previous is not None and previous[0] == path else -1
                previous = (path, until)
                if until < since_generation:
                    continue
                # The first version of a generation past the path's previous row.
                index = bisect.bisect_right(generations, after)
                if index == len(generations) or generations[index] > until:
                    unread.append(pk)
            for piece in range(0, len(unread), _CHUNK):
                pruned += FileHistory.objects.filter(
                    pk__in=unread[piece : piece + _CHUNK]
                ).delete()[0]
    return pruned


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
