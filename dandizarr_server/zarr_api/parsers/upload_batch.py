"""Bodies of a loose upload batch (POST upload/) and of a file deletion (DELETE files/)."""

from __future__ import annotations

from dandizarr.objectstore.multipart import MAX_PARTS
from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
from dandizarr_server.zarr_api.domain.paths import etag_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.problems import (
    Problem,
    check_batch_size,
    check_paths,
    invalid,
)


def _objects(data: object, shape: str) -> list[dict[str, object]]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValidationFailed(f"the body must be a list of {shape} objects")
    check_batch_size(len(data))
    return data


def parse_upload_files(data: object) -> list[FileDeclaration]:
    """``[{"path": ..., "etag": ..., "size"?: ..., "parts"?: [...]}, ...]``: the files to
    upload, their md5s and, for one sent in parts, its size and each part's md5."""
    files = _objects(data, '{"path": ..., "etag": ...}')
    paths = check_paths([f.get("path") for f in files])
    bad_etags: list[Problem] = [
        {"path": path, "problem": f"etag {problem}"}
        for path, f in zip(paths, files, strict=True)
        if (problem := etag_problem(f.get("etag")))
    ]
    if bad_etags:
        raise invalid("etags", bad_etags)
    bad_sizes: list[Problem] = [
        {"path": path, "problem": problem}
        for path, f in zip(paths, files, strict=True)
        if (problem := _size_problem(f))
    ]
    if bad_sizes:
        raise invalid("sizes or parts", bad_sizes)
    return [
        FileDeclaration(
            path,
            str(f["etag"]),
            f.get("size"),  # type: ignore[arg-type]  # checked by _size_problem
            tuple(f.get("parts") or ()),  # type: ignore[arg-type]
        )
        for path, f in zip(paths, files, strict=True)
    ]


def _size_problem(file: dict[str, object]) -> str | None:
    """The optional ``size`` (bytes) and ``parts`` (each part's md5) of a big file."""
    size, parts = file.get("size"), file.get("parts")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        return "size must be a whole number of bytes"
    if parts is None:
        return None
    if size is None:
        return "parts need the file's size"
    if not isinstance(parts, list) or not parts:
        return "parts must be a list of md5s, one per part"
    if len(parts) > MAX_PARTS:  # checked before any part is looked at
        return f"{len(parts)} parts: S3 takes at most {MAX_PARTS}"
    if any(etag_problem(part) for part in parts):
        return "each part must be an md5 as 32 lowercase hex digits"
    return None


def parse_deleted_paths(data: object) -> list[str]:
    """``[{"path": ...}, ...]``: the files to delete."""
    entries = _objects(data, '{"path": ...}')
    return check_paths([e.get("path") for e in entries])


def parse_part_page_request(data: object) -> tuple[str, int]:
    """``{"path": ..., "first_part"?: N}``: which file sent in parts wants part URLs, from
    which part (1, the default, to S3's 10,000)."""
    if not isinstance(data, dict):
        raise ValidationFailed('the body must be {"path": ..., "first_part": ...}')
    [path] = check_paths([data.get("path")])
    first = data.get("first_part", 1)
    if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= MAX_PARTS:
        raise ValidationFailed(f"first_part must be a part number, 1 to {MAX_PARTS}")
    return path, first
