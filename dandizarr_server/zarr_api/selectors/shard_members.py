"""Where packed files live (ShardMember rows) and reading their bytes out of shard objects."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dandizarr.sharding.archive_packing import MemberRecord
from dandizarr_server.zarr_api.models import Batch, BatchFile, Shard, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import STREAM_BLOCK, get_store


@dataclass(frozen=True)
class MemberLocation:
    """``length`` bytes at ``offset`` of the shard object ``key``, and their md5 ("" for a
    range of them)."""

    key: str
    offset: int
    length: int
    md5: str = ""
    # A version of the object other than the current one (an archive version's bytes).
    version_id: str | None = None


def member_locations(archive: ZarrArchive, paths: Iterable[str]) -> dict[str, MemberLocation]:
    """Where each packed file among ``paths`` lives (one query per 1000 paths): the one answer
    to "where are a packed file's bytes" (reads, downloads, manifests, previews). Member rows
    change in the transaction that applies a batch to the tree, so they agree with the
    applied tree."""
    paths = list(paths)
    found: dict[str, MemberLocation] = {}
    for start in range(0, len(paths), 1000):
        rows = ShardMember.objects.filter(
            archive=archive, path__in=paths[start : start + 1000]
        ).values_list("path", "shard__key", "offset", "length", "md5")
        found.update((path, MemberLocation(key, o, n, md5)) for path, key, o, n, md5 in rows)
    return found


def member_location(archive: ZarrArchive, path: str) -> MemberLocation | None:
    return member_locations(archive, [path]).get(path)


def packed_paths(archive: ZarrArchive, paths: Iterable[str]) -> set[str]:
    paths = list(paths)
    found: set[str] = set()
    for start in range(0, len(paths), 1000):
        found.update(
            ShardMember.objects.filter(
                archive=archive, path__in=paths[start : start + 1000]
            ).values_list("path", flat=True)
        )
    return found


def iter_member_bytes(location: MemberLocation) -> Iterator[bytes]:
    store = get_store()
    end = location.offset + location.length
    position = location.offset
    while position < end:
        stop = min(position + STREAM_BLOCK, end)
        if location.version_id is None:
            yield store.get_range(location.key, position, stop)
        else:
            yield store.get_version_range(location.key, location.version_id, position, stop)
        position = stop


def declared_members(shard: Shard) -> Iterator[MemberRecord]:
    """The members a pack batch declared for ``shard`` (before it is verified and applied), in
    the order of their bytes (offset, then size), read a slice of rows at a time: a shard's
    100,000 rows held at once were tens of MB in the worker (psycopg keeps a whole result, and
    then a tuple per row), beside the next batch's start (docs/performance.md)."""
    rows = (
        BatchFile.objects.filter(shard=shard)
        .order_by("offset", "size", "id")
        .values_list("path", "offset", "size", "md5", "slot")
    )
    for p, o, s, m, slot in rows.iterator(chunk_size=2000):
        yield MemberRecord(p, o or 0, s or 0, m, slot)


def live_members(shard: Shard) -> list[MemberRecord]:
    """The members the archive reads from ``shard`` now."""
    return [
        MemberRecord(m.path, m.offset, m.length, m.md5, m.slot)
        for m in ShardMember.objects.filter(shard=shard)
    ]


def unverified_pack_batches(archive_pk: int) -> set[int]:
    """Pending pack batches of the archive with a shard whose members are not checked yet."""
    return set(
        Shard.objects.filter(
            archive_id=archive_pk,
            batch__state=Batch.State.PENDING,
            batch__kind=Batch.Kind.PACK,
            verified=False,
        ).values_list("batch_id", flat=True)
    )
