"""Bodies of a loose upload batch (POST upload/) and of a file deletion (DELETE files/)."""

from __future__ import annotations

from dandizarr_server.zarr_api.declarations import FileDeclaration
from dandizarr_server.zarr_api.exceptions import ValidationFailed
from dandizarr_server.zarr_api.parsers.problems import (
    Problem,
    check_batch_size,
    check_paths,
    invalid,
)
from dandizarr_server.zarr_api.paths import etag_problem


def _objects(data: object, shape: str) -> list[dict[str, object]]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValidationFailed(f"the body must be a list of {shape} objects")
    check_batch_size(len(data))
    return data


def parse_upload_files(data: object) -> list[FileDeclaration]:
    """``[{"path": ..., "etag": ...}, ...]``: the files to upload and their md5s."""
    files = _objects(data, '{"path": ..., "etag": ...}')
    paths = check_paths([f.get("path") for f in files])
    bad_etags: list[Problem] = [
        {"path": path, "problem": f"etag {problem}"}
        for path, f in zip(paths, files, strict=True)
        if (problem := etag_problem(f.get("etag")))
    ]
    if bad_etags:
        raise invalid("etags", bad_etags)
    return [FileDeclaration(path, str(f["etag"])) for path, f in zip(paths, files, strict=True)]


def parse_deleted_paths(data: object) -> list[str]:
    """``[{"path": ...}, ...]``: the files to delete."""
    entries = _objects(data, '{"path": ...}')
    return check_paths([e.get("path") for e in entries])
