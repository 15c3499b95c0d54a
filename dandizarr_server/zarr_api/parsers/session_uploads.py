"""Bodies of a write session's big files (docs/writing.md, "Big files"): a file sent in parts
as it is read, each part's md5 declared when its URL is asked for, the file's md5 at its end."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dandizarr.objectstore.multipart import MAX_PARTS
from dandizarr_server.zarr_api.domain.paths import etag_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.problems import check_paths


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_upload_begin(data: object) -> tuple[str, int]:
    """``{"path": ..., "size": N}``: a big file to send in parts, its size in bytes."""
    if not isinstance(data, dict):
        raise ValidationFailed('the body must be {"path": ..., "size": ...}')
    [path] = check_paths([data.get("path")])
    size = data.get("size")
    if not _whole(size):
        raise ValidationFailed("size must be a whole number of bytes")
    assert isinstance(size, int)
    return path, size


@dataclass(frozen=True)
class PartsDeclared:
    """Parts ``first_part`` on of a big file, each with its md5 (its URL is bound to it)."""

    first_part: int
    md5s: tuple[str, ...]


def parse_parts_declared(data: object) -> PartsDeclared:
    """``{"first_part": N, "md5s": [...]}``: at most ``DANDIZARR_PART_URLS_PAGE`` parts."""
    if not isinstance(data, dict):
        raise ValidationFailed('the body must be {"first_part": ..., "md5s": [...]}')
    first = data.get("first_part")
    if not _whole(first) or not 1 <= first <= MAX_PARTS:  # type: ignore[operator]
        raise ValidationFailed(f"first_part must be a part number, 1 to {MAX_PARTS}")
    md5s = data.get("md5s")
    page = int(settings.DANDIZARR_PART_URLS_PAGE)
    if not isinstance(md5s, list) or not 1 <= len(md5s) <= page:
        raise ValidationFailed(f"md5s must be a list of 1 to {page} part md5s")
    if any(etag_problem(m) for m in md5s):
        raise ValidationFailed("each part's md5 must be 32 lowercase hex digits")
    assert isinstance(first, int)
    return PartsDeclared(first, tuple(str(m) for m in md5s))


def parse_upload_finish(data: object) -> str:
    """``{"etag": md5}``: the md5 of the whole file, once every part was sent."""
    if not isinstance(data, dict) or etag_problem(data.get("etag")):
        raise ValidationFailed('the body must be {"etag": the file\'s md5 as 32 lowercase hex}')
    return str(data["etag"])
