"""The query of the archives listing (``GET /api/zarr/?dandiset=&name=``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.identifiers import parse_row_id


@dataclass(frozen=True)
class ArchiveFilters:
    # A dandiset's row id (-1, which no row has, for an identifier that is not one); None: any.
    dandiset_id: int | None
    name: str | None


def parse_archive_filters(params: Mapping[str, str]) -> ArchiveFilters:
    """Empty values filter nothing; a name with NUL is a 400 (no database holds one)."""
    dandiset = params.get("dandiset")
    name = params.get("name")
    if name and "\x00" in name:
        raise ValidationFailed("name must not contain NUL characters")
    return ArchiveFilters(
        dandiset_id=(parse_row_id(dandiset) or -1) if dandiset else None,
        name=name or None,
    )
