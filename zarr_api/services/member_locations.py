"""Where packed files live as batches apply: ShardMember rows moved to each path's final
state, dead bytes counted toward compaction, and loose copies of packed files deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import F

from zarr_api.models import Batch, BatchFile, Shard, ShardMember, ZarrArchive
from zarr_api.storage import get_store


@dataclass
class LocationChanges:
    # Paths that became members: their loose objects (if any) are now stale.
    packed: list[str] = field(default_factory=list)
    # Shards whose dead share passed the threshold.
    to_compact: list[int] = field(default_factory=list)


def locations_apply(archive: ZarrArchive, batch_ids: Sequence[int]) -> LocationChanges:
    """Point member rows at the batches' final state of each path. Called in the tree update's
    transaction with the TreeLock held, so it commits or rolls back with the batches' state."""
    final: dict[str, tuple[int, int | None, int | None, str, int | None] | None] = {}
    rows = (
        BatchFile.objects.filter(batch_id__in=batch_ids)
        .order_by("batch__sequence", "id")
        .values_list("batch__kind", "path", "shard_id", "offset", "size", "md5", "slot")
    )
    touched_kinds: set[str] = set()
    for kind, path, shard_id, offset, size, md5, slot in rows.iterator(chunk_size=2000):
        touched_kinds.add(kind)
        final[path] = (shard_id, offset, size, md5, slot) if kind == Batch.Kind.PACK else None
    result = LocationChanges()
    if not final:
        return result
    has_members = (
        Batch.Kind.PACK in touched_kinds or ShardMember.objects.filter(archive=archive).exists()
    )
    if not has_members:
        return result
    dead: Counter[int] = Counter()
    paths = list(final)
    for start in range(0, len(paths), 1000):
        chunk = paths[start : start + 1000]
        old = ShardMember.objects.filter(archive=archive, path__in=chunk)
        for shard_id, length in old.values_list("shard_id", "length"):
            dead[shard_id] += length
        old.delete()
    ShardMember.objects.bulk_create(
        (
            ShardMember(
                archive=archive,
                path=path,
                shard_id=loc[0],
                offset=loc[1] or 0,
                length=loc[2] or 0,
                md5=loc[3],
                slot=loc[4],
            )
            for path, loc in final.items()
            if loc is not None
        ),
        batch_size=2000,
    )
    result.packed = [path for path, loc in final.items() if loc is not None]
    new_shards = {loc[0] for loc in final.values() if loc is not None}
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
        busy = set(
            BatchFile.objects.filter(
                batch__archive=archive,
                batch__kind=Batch.Kind.UPLOAD,
                batch__state__in=[Batch.State.OPEN, Batch.State.PENDING],
                path__in=paths,
            ).values_list("path", flat=True)
        )
        packed = set(
            ShardMember.objects.filter(archive=archive, path__in=paths).values_list(
                "path", flat=True
            )
        )
        stale = [p for p in paths if p in packed and p not in busy]
        get_store().delete_many(archive.storage_prefix + p for p in stale)
