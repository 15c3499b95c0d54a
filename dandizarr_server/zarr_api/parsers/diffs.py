"""A diff's query (``GET /api/zarr/{zarr_id}/diff/?to=&after=&limit=``), parsed at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dandizarr_server.zarr_api.domain.paths import path_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.paging import query_positive_int

# Changes a page holds at most, whatever ``limit`` asks for.
DIFF_PAGE_MAX = 10000


@dataclass(frozen=True)
class DiffQuery:
    to: str  # the archive, version or snapshot id compared to
    after: str  # resume past this path ("" from the start)
    limit: int


def parse_diff_query(query: Mapping[str, str]) -> DiffQuery:
    to = query.get("to")
    if not to:
        raise ValidationFailed("to is required: the id (an archive's, a version's) to compare to")
    after = query.get("after", "")
    if after and path_problem(after) is not None:
        raise ValidationFailed("after must be a path of the archive (a page's next)")
    return DiffQuery(to, after, query_positive_int(query, "limit", 1000, DIFF_PAGE_MAX))
