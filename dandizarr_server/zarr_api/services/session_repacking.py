"""A committed write session's chunk files packed into real shards (docs/writing.md, "Sessions
on sharded archives").

A session stages each file as an object of its own, which its commit makes a one-member shard
(``session_commits``). On a sharded archive, once the session's batch is applied, this packs
the chunk files among them as the archive's layout packs chunk files: its arrays' grids read
from the draft's metadata, each array's shards of the ``chunks_per_shard`` its live shards
already have (else the service's default for ``DANDIZARR_SHARD_TARGET_BYTES``), one shard per
plan of ``plan_shards``. Per shard, as compaction does (``services.compaction``): every
member's bytes read from its one-member shard and checked against its md5, the shard written
and checked in storage, then, under the TreeLock, each member row still pointing at the
one-member shard it was read from repointed into the new one, and the one-member shards left
without members discarded (their objects deleted once that commits). The tree does not change:
a file's path, md5 and size stay; only where its bytes are.

Crash safety: shard objects are immutable and rows move only in that transaction, so a worker
killed anywhere leaves every file readable (a shard written and never recorded is an orphan
the audit and garbage collection remove); a rerun repacks what is still in one-member shards.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction

from dandizarr.sharding.archive_packing import (
    METADATA_NAMES,
    ChunkGrid,
    PackingError,
    ShardLayout,
    default_chunks_per_shard,
    find_grids,
    plan_shards,
)
from dandizarr.sharding.archive_packing.plans import ShardPlan
from dandizarr.sharding.metadata_values import MAX_METADATA_BYTES
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, Shard, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.crash import crash_point
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.file_bytes import stored_bytes
from dandizarr_server.zarr_api.services.archive_locks import lock_tree
from dandizarr_server.zarr_api.services.shard_objects import ShardPiece, shard_write

logger = logging.getLogger(__name__)


def session_batch_repack(batch_pk: int) -> int:
    """Pack the chunk files of an applied session batch of a sharded archive into shards; how
    many shards were written. Idempotent: what is packed already is left alone."""
    batch = (
        Batch.objects.filter(pk=batch_pk, kind=Batch.Kind.SESSION, state=Batch.State.APPLIED)
        .select_related("archive")
        .first()
    )
    if batch is None or batch.archive.layout != ZarrArchive.Layout.SHARDED:
        return 0
    archive = batch.archive
    # (path, one-member shard, its key, length, md5) of each file still in the session's shards.
    singles = list(
        ShardMember.objects.filter(
            shard__batch=batch,
            shard__state=Shard.State.LIVE,
            shard__chunks_per_shard__isnull=True,
        ).values_list("path", "shard_id", "shard__key", "length", "md5")
    )
    if not singles:
        return 0
    by_path = {row[0]: row for row in singles}
    try:
        layouts = _layouts(archive, list(by_path))
    except PackingError as error:
        logger.warning("archive %s: session files stay unpacked: %s", archive.zarr_id, error)
        return 0
    plans, _ = plan_shards(layouts, sorted(by_path))
    written = 0
    for plan in plans:
        if _repack(archive, plan, by_path):
            written += 1
    return written


def _layouts(archive: ZarrArchive, paths: Sequence[str]) -> list[ShardLayout]:
    """The layouts of the arrays above ``paths``: their metadata read from the draft."""
    directories = {""}
    for path in paths:
        parent = posixpath.dirname(path)
        while parent and parent not in directories:
            directories.add(parent)
            parent = posixpath.dirname(parent)
    store = get_store()
    metadata: dict[str, bytes] = {}
    for directory in sorted(directories):
        for name in METADATA_NAMES:
            path = f"{directory}/{name}" if directory else name
            try:
                where = stored_bytes(archive, path)
            except NotFound:
                continue
            if where.size > MAX_METADATA_BYTES:  # not an array's metadata; not read
                continue
            metadata[path] = store.get_range(where.key, where.offset, where.offset + where.size)
    layouts = []
    for grid in find_grids(metadata):
        layouts.append(ShardLayout(grid, _chunks_per_shard(archive, grid)))
    return layouts


def _chunks_per_shard(archive: ZarrArchive, grid: ChunkGrid) -> tuple[int, ...]:
    """The chunks per shard the array's live shards have (the archive's pack layout), else
    the service's default."""
    below = f"{grid.array_path}/" if grid.array_path else ""
    known = (
        Shard.objects.filter(
            archive=archive,
            state=Shard.State.LIVE,
            name__startswith=below,
            chunks_per_shard__isnull=False,
        )
        .values_list("chunks_per_shard", flat=True)
        .first()
    )
    if (
        isinstance(known, list)
        and len(known) == grid.ndim
        and all(isinstance(n, int) and n > 0 for n in known)
    ):
        return tuple(known)
    return default_chunks_per_shard(grid, settings.DANDIZARR_SHARD_TARGET_BYTES)


def _repack(
    archive: ZarrArchive, plan: ShardPlan, by_path: dict[str, tuple[str, int, str, int, str]]
) -> bool:
    store = get_store()
    members = [m for m in plan.members if m.path in by_path]
    datas = store.map_requests(
        lambda m: (
            store.get_range(by_path[m.path][2], 0, by_path[m.path][3])
            if by_path[m.path][3]
            else b""
        ),
        members,
    )
    pieces = []
    for member, data in zip(members, datas, strict=True):
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != by_path[member.path][4]:
            raise RuntimeError(
                f"archive {archive.zarr_id}: {member.path!r} does not match its md5 in its "
                "session's shard; run the audit"
            )
        pieces.append(ShardPiece(member.path, member.slot, data))
    if not pieces:
        return False
    shard, records = shard_write(archive, plan.name, plan.layout.chunks_per_shard, pieces)
    crash_point("repack:shard-written")
    with transaction.atomic():
        lock_tree(archive.pk)
        shard.save()
        old = {path: by_path[path][1] for path in (r.path for r in records)}
        current = {
            m.path: m
            for m in ShardMember.objects.select_for_update().filter(
                archive=archive, path__in=list(old)
            )
        }
        dead = 0
        for record in records:
            row = current.get(record.path)
            # Moved only if still where it was read from, with those bytes (a later write of
            # the path owns it now).
            if row is None or row.shard_id != old[record.path] or row.md5 != record.md5:
                dead += record.length
                continue
            ShardMember.objects.filter(pk=row.pk).update(
                shard=shard, offset=record.offset, length=record.length, slot=record.slot
            )
        if dead:
            Shard.objects.filter(pk=shard.pk).update(dead_bytes=dead)
        emptied = Shard.objects.filter(pk__in=set(old.values()), state=Shard.State.LIVE).exclude(
            pk__in=ShardMember.objects.filter(shard_id__in=set(old.values())).values("shard_id")
        )
        keys = list(emptied.values_list("key", flat=True))
        emptied.update(state=Shard.State.DISCARDED)
        transaction.on_commit(lambda: store.delete_many(keys))
    crash_point("repack:swapped")
    return True
