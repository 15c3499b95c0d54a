"""Where packed files live as batches apply: ShardMember rows moved to each path's final
state, dead bytes counted toward compaction, and loose copies of packed files deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import F

from dandizarr_server.zarr_api.models import Batch, BatchFile, Shard, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.batch_states import loose_upload_paths
from dandizarr_server.zarr_api.selectors.shard_members import member_rows_at, packed_paths
from dandizarr_server.zarr_api.services.bulk_rows import (
    ROWS_PER_STATEMENT,
    members_from_batch_files,
)


@dataclass
class LocationChanges:
    # Paths that became members and may have a loose object (now stale): loose in the tree
    # before, or uploaded loose by one of the batches applied.
    packed: list[str] = field(default_factory=list)
    # Shards whose dead share passed the threshold.
    to_compact: list[int] = field(default_factory=list)


def locations_apply(
    archive: ZarrArchive,
    batch_ids: Sequence[int],
    in_tree_before: Collection[str] = (),
    *,
    packing: bool,
) -> LocationChanges:
    """Point member rows at the batches' final state of each path. Called in the tree update's
    transaction with the TreeLock held, so it commits or rolls back with the batches' state.
    ``in_tree_before``: the batches' paths the tree held before
    (``selectors.draft_trees.paths_in_tree``)."""
    result = LocationChanges()
    # A loose archive (no member, no pack batch among ``batch_ids``: ``packing``) has no
    # locations to move: its batches' rows, read once already by the update, are not read again.
    if not packing and not ShardMember.objects.filter(archive=archive).exists():
        return result
    # Each path's final state: the id of the pack batch row that packs it, or None (deleted,
    # or uploaded loose). Ids only: the rows' values are copied by the database below.
    final: dict[str, int | None] = {}
    rows = (
        BatchFile.objects.filter(batch_id__in=batch_ids)
        .order_by("batch__sequence", "id")
        .values_list("batch__kind", "path", "id", "shard_id")
    )
    uploaded_loose: set[str] = set()
    for kind, path, row_id, shard_id in rows.iterator(chunk_size=2000):
        if kind == Batch.Kind.UPLOAD:
            uploaded_loose.add(path)
        # Packed: a pack batch's members, and a write session's files (each its own shard).
        packs = kind == Batch.Kind.PACK or (kind == Batch.Kind.SESSION and shard_id is not None)
        final[path] = row_id if packs else None
    if not final:
        return result
    dead: Counter[int] = Counter()
    were_members: set[str] = set()
    # The members the batches' paths had, looked up by path: a batch's work must not grow with
    # the archive (one query with the batches' rows as a subquery made PostgreSQL scan every
    # member of the archive, each batch: 31x the time for 10x the files).
    old: list[int] = []
    for pk, shard_id, length, path in member_rows_at(archive, list(final)):
        dead[shard_id] += length
        were_members.add(path)
        old.append(pk)
    for start in range(0, len(old), ROWS_PER_STATEMENT):
        ShardMember.objects.filter(pk__in=old[start : start + ROWS_PER_STATEMENT]).delete()
    new_shards = members_from_batch_files(
        archive.pk, (row_id for row_id in final.values() if row_id is not None)
    )
    result.packed = [
        path
        for path, row_id in final.items()
        if row_id is not None
        and (path in uploaded_loose or (path in in_tree_before and path not in were_members))
    ]
    Shard.objects.filter(pk__in=new_shards).update(state=Shard.State.LIVE)
    for shard_id, length in dead.items():
        Shard.objects.filter(pk=shard_id).update(dead_bytes=F("dead_bytes") + length)
    result.to_compact = _compaction_due(dead.keys())
    return result


def _compaction_due(shard_ids: Iterable[int]) -> list[int]:
    percent = settings.DANDIZARR_SHARD_COMPACT_PERCENT
    return [
        pk
        for pk, size, dead_bytes in Shard.objects.filter(
            pk__in=list(shard_ids), state=Shard.State.LIVE
        ).values_list("pk", "size", "dead_bytes")
        if dead_bytes * 100 >= percent * max(size, 1)
    ]


def stale_loose_copies_delete(archive_pk: int, paths: Sequence[str]) -> None:
    """Delete loose objects of paths that are now packed, unless a later batch (open or
    pending) is uploading the path loose again: then the loose object is that batch's."""
    if not paths:
        return
    with transaction.atomic():
        archive = ZarrArchive.objects.select_for_update().get(pk=archive_pk)
        busy = loose_upload_paths(archive, paths)
        packed = packed_paths(archive, paths)
        stale = [p for p in paths if p in packed and p not in busy]
        get_store().delete_many(archive.storage_prefix + p for p in stale)
