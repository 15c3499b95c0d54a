"""Many rows inserted at once without a model instance per row: ``bulk_create`` builds an
object and compiles its values for every row, which dominates a pack batch of 100,000 members;
here each row is a plain tuple sent with ``executemany``, a slice at a time (a generator is
never held whole)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any

from django.db import connection, models

ROWS_PER_STATEMENT = 5000


def rows_insert(
    model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Insert ``rows`` (values in ``fields`` order; foreign keys by their ``*_id``) into
    ``model``'s table, in the caller's transaction; how many were inserted. Nothing is
    converted: values must already be what the columns hold (ints, strings, None)."""
    meta = model._meta
    concrete = {f.name: f.column for f in meta.concrete_fields}
    columns = ", ".join(connection.ops.quote_name(concrete[f]) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = (
        f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) "
        f"VALUES ({placeholders})"
    )
    inserted = 0
    iterator = iter(rows)
    with connection.cursor() as cursor:
        while chunk := list(islice(iterator, ROWS_PER_STATEMENT)):
            cursor.executemany(sql, chunk)
            inserted += len(chunk)
    return inserted
