"""Writing a batch's file rows in bulk: one statement per 1,000 rows (Django's ``bulk_create``
builds a model object and its SQL per row, and ``bulk_update`` a CASE per row, which cost more
than the rest of a batch's start or completion)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice

from django.db import connection

from zarr_api.models import BatchFile

ROWS_PER_STATEMENT = 1000


def batch_files_insert(batch_pk: int, rows: Iterable[tuple[str, str, int | None]]) -> None:
    """Insert ``(path, md5, size)`` rows into batch ``batch_pk`` (md5 empty for deletions)."""
    table = BatchFile._meta.db_table
    iterator = iter(rows)
    with connection.cursor() as cursor:
        while chunk := list(islice(iterator, ROWS_PER_STATEMENT)):
            values = ", ".join(["(%s, %s, %s, %s)"] * len(chunk))
            params = [v for path, md5, size in chunk for v in (batch_pk, path, md5, size)]
            cursor.execute(
                f"INSERT INTO {table} (batch_id, path, md5, size) VALUES {values}", params
            )


def record_sizes(files: Sequence[BatchFile]) -> None:
    """Store the sizes storage reported for ``files`` (rows already in the database)."""
    table = BatchFile._meta.db_table
    with connection.cursor() as cursor:
        for start in range(0, len(files), ROWS_PER_STATEMENT):
            chunk = files[start : start + ROWS_PER_STATEMENT]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            params = [value for f in chunk for value in (f.pk, f.size)]
            # VALUES columns are named column1, column2 in both PostgreSQL and SQLite.
            cursor.execute(
                f"UPDATE {table} SET size = v.column2 FROM (VALUES {values}) AS v "
                f"WHERE {table}.id = v.column1",
                params,
            )
