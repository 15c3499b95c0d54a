"""Many rows inserted at once without a model instance per row: ``bulk_create`` builds an
object and compiles its values for every row, which dominates a pack batch of 100,000 members;
here each row is a plain tuple, sent a slice at a time (a generator is never held whole)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, Protocol

from django.db import connection, models

from dandizarr_server.zarr_api.models import BatchFile, ShardMember

ROWS_PER_STATEMENT = 5000
# Rows whose size one UPDATE ... FROM (VALUES ...) sets.
UPDATES_PER_STATEMENT = 1000


def rows_insert(
    model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Insert ``rows`` (values in ``fields`` order; foreign keys by their ``*_id``) into
    ``model``'s table, in the caller's transaction; how many were inserted. Nothing is
    converted: values must already be what the columns hold (ints, strings, None).

    SQLite runs ``executemany`` in C. psycopg sends a message per row of it, the larger part
    of an add's CPU; PostgreSQL gets a slice's columns as arrays instead, unnested into rows by
    the server."""
    meta = model._meta
    by_name = {f.name: f for f in meta.concrete_fields}
    table = connection.ops.quote_name(meta.db_table)
    columns = ", ".join(connection.ops.quote_name(by_name[f].column) for f in fields)
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{by_name[f].db_type(connection)}[]" for f in fields)
        sql = f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays})"
    else:
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    inserted = 0
    iterator = iter(rows)
    with connection.cursor() as cursor:
        while chunk := list(islice(iterator, ROWS_PER_STATEMENT)):
            if connection.vendor == "postgresql":
                cursor.execute(sql, [list(column) for column in zip(*chunk, strict=True)])
            else:
                cursor.executemany(sql, chunk)
            inserted += len(chunk)
    return inserted


def members_from_batch_files(archive_pk: int, row_ids: Iterable[int]) -> set[int]:
    """A ShardMember of archive ``archive_pk`` for each pack batch row of ``row_ids``, copied
    by the database from the row (its path, shard, offset, size, md5 and slot) a slice of ids
    at a time, in the caller's transaction; the shards they are in.

    The rows' values never come to Python: a pack batch's tuples of a path, an md5 and three
    ints were a large part of the tree update's memory (docs/performance.md)."""
    quote = connection.ops.quote_name
    to = ", ".join(
        _columns(ShardMember, ("archive", "path", "shard", "offset", "length", "md5", "slot"))
    )
    path, shard, offset, size, md5, slot = _columns(
        BatchFile, ("path", "shard", "offset", "size", "md5", "slot")
    )
    member_table, table = quote(ShardMember._meta.db_table), quote(BatchFile._meta.db_table)
    pk = _columns(BatchFile, ("id",))[0]
    shards: set[int] = set()
    iterator = iter(row_ids)
    with connection.cursor() as cursor:
        while chunk := list(islice(iterator, ROWS_PER_STATEMENT)):
            params: list[Any]
            if connection.vendor == "postgresql":
                where, params = f"{pk} = ANY(%s)", [chunk]
            else:
                where, params = f"{pk} IN ({', '.join(['%s'] * len(chunk))})", chunk
            cursor.execute(
                f"INSERT INTO {member_table} ({to}) SELECT {int(archive_pk)}, {path}, {shard}, "
                f"COALESCE({offset}, 0), COALESCE({size}, 0), {md5}, {slot} FROM {table} "
                f"WHERE {where} ORDER BY {pk}",
                params,
            )
            cursor.execute(f"SELECT DISTINCT {shard} FROM {table} WHERE {where}", params)
            shards.update(shard_id for (shard_id,) in cursor.fetchall())
    return shards


def _columns(model: type[models.Model], fields: Sequence[str]) -> list[str]:
    """The quoted columns of ``model``'s ``fields`` (foreign keys: their ``*_id``)."""
    by_name = {f.name: f for f in model._meta.concrete_fields}
    return [connection.ops.quote_name(by_name[f].column) for f in fields]


def batch_files_insert(batch_pk: int, rows: Iterable[tuple[str, str, int | None]]) -> int:
    """Insert ``(path, md5, size)`` rows into batch ``batch_pk`` (md5 empty for deletions)."""
    return rows_insert(
        BatchFile,
        ["batch", "path", "md5", "size"],
        ((batch_pk, path, md5, size) for path, md5, size in rows),
    )


class SizedRow(Protocol):
    @property
    def pk(self) -> int: ...

    @property
    def size(self) -> int | None: ...


def record_sizes(files: Sequence[SizedRow]) -> None:
    """Store the sizes storage reported for ``files`` (rows already in the database)."""
    table = BatchFile._meta.db_table
    with connection.cursor() as cursor:
        for start in range(0, len(files), UPDATES_PER_STATEMENT):
            chunk = files[start : start + UPDATES_PER_STATEMENT]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            params = [value for f in chunk for value in (f.pk, f.size)]
            # VALUES columns are named column1, column2 in both PostgreSQL and SQLite.
            cursor.execute(
                f"UPDATE {table} SET size = v.column2 FROM (VALUES {values}) AS v "
                f"WHERE {table}.id = v.column1",
                params,
            )
