"""Shard objects in storage (docs/sharded.md): fresh keys, writing and checking a new shard,
discarding old ones.

Shard objects are immutable: compaction and conversion write new ones and swap rows in a
transaction, and an object is deleted only once no row points into it. So a crash at any
point leaves every file readable, and a rerun finishes the job.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dandizarr.sharding.archive_packing import MemberRecord, build_shard
from dandizarr_server.zarr_api.domain.keys import new_shard_key
from dandizarr_server.zarr_api.models import Shard, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store


def discard_shards(shards: Iterable[Shard]) -> None:
    """Mark shards discarded and delete their objects (the rows stay, for the record)."""
    shards = list(shards)
    if not shards:
        return
    Shard.objects.filter(pk__in=[s.pk for s in shards]).update(state=Shard.State.DISCARDED)
    get_store().delete_many(s.key for s in shards)


@dataclass(frozen=True)
class ShardPiece:
    """A file's bytes to write into a new shard (at inner chunk ``slot`` when it has one)."""

    path: str
    slot: int | None
    data: bytes


def shard_write(
    archive: ZarrArchive, name: str, chunks_per_shard: Sequence[int], pieces: Sequence[ShardPiece]
) -> tuple[Shard, list[MemberRecord]]:
    """Build the shard in memory (one shard: tens of MB), store it under a fresh key and check
    what storage holds; returns an unsaved Shard and the members' records."""
    buffer = io.BytesIO()
    built = build_shard(chunks_per_shard, ((p.path, p.slot, p.data) for p in pieces), buffer)
    key = new_shard_key(archive.zarr_id, name)
    info = get_store().put(key, buffer.getvalue())
    if info.etag != built.md5 or info.size != built.size:
        raise RuntimeError(
            f"shard {key}: storage holds {info.etag}/{info.size}, wrote {built.md5}/{built.size}"
        )
    shard = Shard(
        archive=archive,
        name=name,
        key=key,
        size=built.size,
        md5=built.md5,
        state=Shard.State.LIVE,
        verified=True,
        chunks_per_shard=list(chunks_per_shard),
    )
    return shard, list(built.members)
