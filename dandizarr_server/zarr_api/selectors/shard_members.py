"""Where packed files live (ShardMember rows) and reading their bytes out of shard objects."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

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
    # The current object, on condition that its ETag is this (else PreconditionFailed): a
    # version's file the draft holds still, read without looking its object version up.
    if_match: str | None = None


# Paths are looked up a list at a time, each path by (archive, path) in the unique index, so a
# look-up's cost is its paths', never the archive's. PostgreSQL is told so in the query itself
# (one LIMIT 1 probe per path): given ``archive_id = %s AND path IN (...)`` it chose from its
# statistics, and a growing archive's are stale (autovacuum lags behind a table that grows by
# a pack batch's rows at a time, or is off): it scanned every member of the archive for each
# list, and an upload's time grew with the square of its files (docs/performance.md).
PATHS_PER_QUERY = 1000

_MEMBERS = ShardMember._meta.db_table
_SHARDS = Shard._meta.db_table
_PROBE = f"""
SELECT {{columns}} FROM unnest(%s::text[]) AS wanted(path)
CROSS JOIN LATERAL (
    SELECT * FROM {_MEMBERS} WHERE archive_id = %s AND path = wanted.path LIMIT 1
) AS m {{join}}
"""
_LOCATION_COLUMNS = ("path", "shard__key", "offset", "length", "md5")
_LOCATION_SQL = _PROBE.format(
    columns="m.path, s.key, m.offset, m.length, m.md5",
    join=f"JOIN {_SHARDS} AS s ON s.id = m.shard_id",
)
_ROW_COLUMNS = ("pk", "shard_id", "length", "path")
_ROW_SQL = _PROBE.format(columns="m.id, m.shard_id, m.length, m.path", join="")


def _members_of(
    archive: ZarrArchive, paths: Sequence[str], columns: tuple[str, ...], sql: str
) -> Iterator[tuple[Any, ...]]:
    for start in range(0, len(paths), PATHS_PER_QUERY):
        chunk = list(paths[start : start + PATHS_PER_QUERY])
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(sql, [chunk, archive.pk])
                yield from cursor.fetchall()
        else:  # SQLite probes the unique index for an IN list by itself
            yield from ShardMember.objects.filter(archive=archive, path__in=chunk).values_list(
                *columns
            )


def member_locations(archive: ZarrArchive, paths: Iterable[str]) -> dict[str, MemberLocation]:
    """Where each packed file among ``paths`` lives (one query per ``PATHS_PER_QUERY`` paths):
    the one answer to "where are a packed file's bytes" (reads, downloads, manifests,
    previews). Member rows change in the transaction that applies a batch to the tree, so they
    agree with the applied tree."""
    rows = _members_of(archive, list(paths), _LOCATION_COLUMNS, _LOCATION_SQL)
    return {path: MemberLocation(key, o, n, md5) for path, key, o, n, md5 in rows}


def member_rows_at(
    archive: ZarrArchive, paths: Sequence[str]
) -> Iterator[tuple[int, int, int, str]]:
    """``(pk, shard_id, length, path)`` of the member rows of ``paths`` (those packed now)."""
    yield from _members_of(archive, paths, _ROW_COLUMNS, _ROW_SQL)


def member_location(archive: ZarrArchive, path: str) -> MemberLocation | None:
    return member_locations(archive, [path]).get(path)


def packed_paths(archive: ZarrArchive, paths: Iterable[str]) -> set[str]:
    paths = list(paths)
    return {path for _, _, _, path in member_rows_at(archive, paths)}


def iter_member_bytes(location: MemberLocation) -> Iterator[bytes]:
    store = get_store()
    end = location.offset + location.length
    position = location.offset
    while position < end:
        stop = min(position + STREAM_BLOCK, end)
        if location.if_match is not None:
            yield store.read_range(location.key, position, stop, if_match=location.if_match)[0]
        elif location.version_id is None:
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
