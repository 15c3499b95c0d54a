"""What storage holds at an archive's paths: each object's size and ETag, asked for at once."""

from __future__ import annotations

from collections.abc import Sequence

from dandizarr.objectstore import ObjectInfo
from dandizarr.objectstore.keys import key_problem
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store


def stored_heads(archive: ZarrArchive, paths: Sequence[str]) -> dict[str, ObjectInfo | None]:
    """Size and ETag of each path of the archive in storage, requested concurrently. A key no
    storage can hold (in a batch opened by an older version) is absent, not asked for."""
    prefix = archive.storage_prefix
    infos = get_store().head_many([prefix + p for p in storable_paths(archive, paths)])
    return {p: infos.get(prefix + p) for p in paths}


def storable_paths(archive: ZarrArchive, paths: Sequence[str]) -> list[str]:
    return [p for p in paths if key_problem(archive.storage_prefix + p) is None]
