"""Public identifiers in URLs and query parameters: zarr, version and asset ids (UUIDs), and row
ids (a dandiset's identifier, a batch's or version's number). Parsed, never trusted: what is not
one is None, and the lookup answers 404 as for a row that does not exist."""

from __future__ import annotations

import uuid

# The largest primary key a database row can have (a 64-bit signed integer).
MAX_ROW_ID = 2**63 - 1


def parse_zarr_id(zarr_id: object) -> uuid.UUID | None:
    """A UUID (zarr ids and asset ids are UUIDs), or None when ``zarr_id`` is none."""
    try:
        return zarr_id if isinstance(zarr_id, uuid.UUID) else uuid.UUID(str(zarr_id))
    except ValueError:
        return None


def parse_row_id(text: str) -> int | None:
    """A row's integer id (a dandiset's identifier, a batch's id), or None when ``text`` is
    not one (not ASCII digits, or past what a database row id can be)."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_ROW_ID:
        return None
    return int(text)
