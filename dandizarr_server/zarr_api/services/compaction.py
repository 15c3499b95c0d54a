"""Compaction: a shard whose dead share passed the threshold rewritten with its live members."""

from __future__ import annotations

import hashlib
import logging
import math

from django.db import transaction

from dandizarr.sharding.archive_packing import MemberRecord
from dandizarr_server.zarr_api.models import Shard, ShardMember
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.archive_locks import lock_tree
from dandizarr_server.zarr_api.services.shard_objects import ShardPiece, shard_write

logger = logging.getLogger(__name__)


def shard_compact(shard_pk: int) -> bool:
    """Rewrite a shard with only its live members; the old object goes once nothing points in.

    The copy is checked member by member (md5) before the swap; members deleted or moved while
    copying stay as they are (the swap only repoints rows that still point at the old shard).
    """
    old = (
        Shard.objects.filter(pk=shard_pk, state=Shard.State.LIVE).select_related("archive").first()
    )
    if old is None:
        return False
    archive = old.archive
    live = list(ShardMember.objects.filter(shard=old).order_by("offset"))
    pieces = []
    store = get_store()
    for member in live:
        data = (
            store.get_range(old.key, member.offset, member.offset + member.length)
            if member.length
            else b""
        )
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != member.md5:
            raise RuntimeError(
                f"shard {old.key}: member {member.path!r} does not match its md5; run the audit"
            )
        pieces.append(ShardPiece(member.path, member.slot, data))
    new: Shard | None = None
    records: list[MemberRecord] = []
    if pieces:
        cps = old.chunks_per_shard or [max([p.slot or 0 for p in pieces]) + 1]
        slots_ok = all(p.slot is not None and p.slot < math.prod(cps) for p in pieces)
        if not slots_ok:
            pieces = [ShardPiece(p.path, None, p.data) for p in pieces]
        new, records = shard_write(archive, old.name, cps, pieces)
    with transaction.atomic():
        lock_tree(archive.pk)
        current = {m.path: m for m in ShardMember.objects.filter(shard=old).select_for_update()}
        moved = 0
        if new is not None:
            new.save()
            by_path = {r.path: r for r in records}
            for path, member in current.items():
                record = by_path.get(path)
                if record is not None and record.md5 == member.md5:
                    ShardMember.objects.filter(pk=member.pk).update(shard=new, offset=record.offset)
                    moved += 1
            dead = sum(r.length for r in records if r.path not in current)
            Shard.objects.filter(pk=new.pk).update(dead_bytes=dead)
        if ShardMember.objects.filter(shard=old).exists():
            return False  # a member appeared meanwhile (cannot happen under the lock, but be safe)
        Shard.objects.filter(pk=old.pk).update(state=Shard.State.DISCARDED)
        transaction.on_commit(lambda: store.delete_many([old.key]))
    logger.info("compacted shard %s into %s (%d members)", old.key, new.key if new else None, moved)
    return True
