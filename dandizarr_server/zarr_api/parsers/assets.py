"""Bodies that add an asset to a draft (POST) or change one (PUT/PATCH)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dandizarr_server.zarr_api.domain.paths import path_problem
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed


@dataclass(frozen=True)
class NewAsset:
    path: str
    zarr_id: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class AssetChanges:
    """What a PUT/PATCH changes (None: left as it is)."""

    path: str | None
    metadata: dict[str, Any] | None
    # The archive the asset must point at (a PUT of the DANDI API sends it; changing it is
    # refused).
    zarr_id: str | None = None


def _checked_path(path: object) -> str:
    problem = path_problem(path)
    if problem:
        raise ValidationFailed(f"asset path {path!r} {problem}")
    return str(path)


def _checked_metadata(metadata: object) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        raise ValidationFailed("metadata must be a JSON object")
    if _holds_nul(metadata):
        raise ValidationFailed("metadata must not contain NUL characters (\\u0000)")
    return metadata


def _holds_nul(value: object) -> bool:
    """Whether a JSON value has a NUL in a string or a key (the database cannot store one)."""
    pending = [value]
    while pending:  # not recursive: the parser already accepted any depth it could
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _object(data: object, fields: set[str], what: str) -> dict[str, Any]:
    """The body as an object of ``fields`` only: nothing sent is silently ignored."""
    if not isinstance(data, dict):
        raise ValidationFailed(f"the body must be a JSON object with {what}")
    if data.get("blob_id") is not None:
        raise ValidationFailed(
            "blob_id is not supported by this service: give zarr_id to add a zarr archive"
        )
    unknown = sorted(str(name) for name in data if name not in fields | {"blob_id"})
    if unknown:
        raise ValidationFailed(f"unknown field(s): {', '.join(unknown)}; the body takes {what}")
    return data


def _path_of(body: dict[str, Any], metadata: dict[str, Any] | None) -> object:
    """The path given (None when none): ``path``, or the DANDI API's ``metadata.path``."""
    if "path" in body:
        return body["path"]
    return metadata.get("path") if metadata is not None else None


def parse_new_asset(data: object) -> NewAsset:
    """``{"path", "zarr_id", "metadata"?}``, or the DANDI API's form
    ``{"metadata": {"path": ...}, "zarr_id": ...}``."""
    body = _object(data, {"path", "zarr_id", "metadata"}, "path, zarr_id and metadata")
    metadata = _checked_metadata(body.get("metadata", {}))
    path = _path_of(body, metadata)
    missing = [
        name for name, value in (("path", path), ("zarr_id", body.get("zarr_id"))) if not value
    ]
    if missing:
        raise ValidationFailed(f"missing field(s): {', '.join(missing)}")
    return NewAsset(_checked_path(path), str(body["zarr_id"]), metadata)


def parse_asset_changes(data: object) -> AssetChanges:
    """``{"path"?, "metadata"?, "zarr_id"?}``: the fields given are changed (each must be
    valid), the others kept. The DANDI API's PUT sends the path in the metadata and the asset's
    own ``zarr_id``."""
    body = _object(data, {"path", "metadata", "zarr_id"}, "path, metadata and/or zarr_id")
    metadata = _checked_metadata(body["metadata"]) if "metadata" in body else None
    path = _path_of(body, metadata)
    zarr_id = body.get("zarr_id")
    return AssetChanges(
        None if path is None and "path" not in body else _checked_path(path),
        metadata,
        None if zarr_id is None else str(zarr_id),
    )


# The longest asset glob taken: a pattern is a path, and paths are short.
_GLOB_MAX = 1024


def parse_asset_glob(pattern: str) -> str:
    """The DANDI API's ``?glob=`` of an assets listing as an anchored, case-insensitive
    PostgreSQL regular expression, as the DANDI Archive reads it (and dandi 0.81 checks what
    it downloads against): ``*`` any run of characters, ``/`` too; every other character,
    ``?`` and ``[`` included, itself."""
    if not pattern or len(pattern) > _GLOB_MAX or "\x00" in pattern:
        raise ValidationFailed(
            f"glob must be 1 to {_GLOB_MAX} characters without NUL", code="invalid_asset_glob"
        )
    return "^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$"


@dataclass(frozen=True)
class AssetFilters:
    """An assets listing's query: a path prefix, a glob (as a regular expression); None: any."""

    path_prefix: str | None
    path_regex: str | None


def parse_asset_filters(params: Mapping[str, str]) -> AssetFilters:
    """``?path=`` (a prefix, as the DANDI API's: dandi finds a folder's assets with it, and an
    asset by its path by keeping the exact match of the answer) and ``?glob=`` (dandi download
    --path-type glob)."""
    glob = params.get("glob")
    return AssetFilters(
        path_prefix=params.get("path"),
        path_regex=parse_asset_glob(glob) if glob is not None else None,
    )
