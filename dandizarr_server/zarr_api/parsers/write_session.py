"""Bodies and queries of the write-session routes (docs/writing.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.paging import query_positive_int
from dandizarr_server.zarr_api.parsers.problems import Problem, invalid
from dandizarr_server.zarr_api.parsers.upload_batch import parse_upload_files

# The most changed paths a page of a session's changes holds.
CHANGES_LIMIT = 10_000
# The longest ``prefix``, ``path`` or ``after`` a query may give (a storage key's length).
_QUERY_TEXT_MAX = 1024


def parse_staged_files(data: object) -> list[FileDeclaration]:
    """``[{"path", "etag", "size"}, ...]``: files to stage, each with its md5 and size (a
    session's file goes in one PUT: no parts)."""
    files = parse_upload_files(data)
    problems: list[Problem] = [
        {"path": f.path, "problem": "needs its size (bytes), and no parts"}
        for f in files
        if f.size is None or f.part_md5s
    ]
    if problems:
        raise invalid("sizes", problems)
    return files


@dataclass(frozen=True)
class ChangesQuery:
    prefix: str
    after: str | None
    path: str | None
    limit: int


def parse_changes_query(query: Mapping[str, str]) -> ChangesQuery:
    """``?prefix=&after=&limit=``, or ``?path=`` for one path."""
    texts = {name: query.get(name) for name in ("prefix", "after", "path")}
    for name, text in texts.items():
        if text is not None and (len(text) > _QUERY_TEXT_MAX or "\x00" in text):
            raise ValidationFailed(f"{name} must be at most {_QUERY_TEXT_MAX} characters, no NUL")
    return ChangesQuery(
        texts["prefix"] or "",
        texts["after"],
        texts["path"],
        query_positive_int(query, "limit", 1000, CHANGES_LIMIT),
    )
