"""An archive's row and its dandiset's, by ``zarr_id`` or ``pk``, in one statement that the ORM
compiles once per process: what every read (a chunk of ``/zarr/``, a page, an API call) looks
an archive up by.

The row is read from the database every time (its draft state and its dandiset's embargo move
with any process's commit, and a read must never see them stale); only the work of turning the
query into SQL is kept. A chunk read spent about a quarter of its CPU compiling the same
``SELECT ... JOIN`` (docs/performance.md, "Chunk reads").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections, router
from django.db.models import Field

from dandizarr_server.zarr_api.models import Dandiset, ZarrArchive


@dataclass(frozen=True)
class _Compiled:
    sql: str
    # The archive's and the dandiset's columns in the row, and their models' field names.
    archive: tuple[list[int], list[str]]
    dandiset: tuple[list[int], list[str]]
    # Column index -> the ORM's conversions of what the database returns (JSON, dates).
    converters: dict[int, tuple[list[Callable[..., Any]], Any]]


_compiled: dict[tuple[str, str], _Compiled] = {}
_lock = threading.Lock()


def _compile(alias: str, column: str, value: object) -> _Compiled:
    query = ZarrArchive.objects.select_related("dandiset").filter(**{column: value}).order_by()
    compiler = query.query.get_compiler(using=alias)
    sql, _ = compiler.as_sql()
    expressions = [col for col, _, _ in compiler.select]
    klass = compiler.klass_info
    assert klass is not None
    (related,) = klass["related_klass_infos"]

    def fields(indexes: list[int]) -> tuple[list[int], list[str]]:
        return indexes, [expressions[i].target.attname for i in indexes]

    return _Compiled(
        sql,
        fields(klass["select_fields"]),
        fields(related["select_fields"]),
        compiler.get_converters(expressions),
    )


def archive_row(column: str, value: object) -> ZarrArchive | None:
    """The archive whose ``column`` (``zarr_id`` or ``pk``) is ``value``, its dandiset loaded
    with it (as ``select_related("dandiset")`` loads it), or None."""
    alias = router.db_for_read(ZarrArchive)
    connection = connections[alias]
    with _lock:
        compiled = _compiled.get((connection.vendor, column))
    if compiled is None:
        compiled = _compile(alias, column, value)
        with _lock:
            _compiled[connection.vendor, column] = compiled
    field = ZarrArchive._meta.pk if column == "pk" else ZarrArchive._meta.get_field(column)
    assert isinstance(field, Field)
    with connection.cursor() as cursor:
        cursor.execute(compiled.sql, [field.get_db_prep_value(value, connection)])
        found = cursor.fetchone()
    if found is None:
        return None
    row = list(found)
    for index, (functions, expression) in compiled.converters.items():
        for function in functions:
            row[index] = function(row[index], expression, connection)
    archive_indexes, archive_fields = compiled.archive
    dandiset_indexes, dandiset_fields = compiled.dandiset
    archive = ZarrArchive.from_db(alias, archive_fields, [row[i] for i in archive_indexes])
    dandiset = Dandiset.from_db(alias, dandiset_fields, [row[i] for i in dandiset_indexes])
    ZarrArchive.dandiset.field.set_cached_value(archive, dandiset)
    return archive
