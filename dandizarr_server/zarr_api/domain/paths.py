"""Which archive paths and ETags the API accepts: exactly what every storage backend can hold.

A path is accepted only if the tree hash can hold it (``dandizarr.checksums.paths``) and every key
it implies (its file key and its directory's ``.checksum`` key, ``zarr_api.domain.keys``) is a key
every backend can store (``dandizarr.objectstore.keys``). So a path accepted at batch start can
always be signed, stored, listed and hashed. The one rule added here is the service's own: no
backslash, so that a download lands as the same files on every operating system.
"""

from __future__ import annotations

import uuid
from functools import lru_cache

from dandizarr.checksums import is_md5
from dandizarr.checksums.paths import parent
from dandizarr.checksums.paths import path_problem as tree_path_problem
from dandizarr.objectstore.keys import key_problem
from dandizarr_server.zarr_api.domain.keys import checksum_key, file_key, new_shard_key

# Keys are checked for an archive whose id has the usual length; every zarr_id is a UUID
# (as text once: formatting a UUID per path is a tenth of a batch's path checks).
_ANY_ZARR_ID = str(uuid.UUID(int=0))


def path_problem(path: object) -> str | None:
    """Why ``path`` is not a valid archive file path, or None when it is."""
    return (
        _name_problem(path)
        or _keys_problem(file_key(_ANY_ZARR_ID, str(path)))
        or _directory_keys_problem(parent(str(path)))
    )


@lru_cache(maxsize=4096)
def _directory_keys_problem(directory: str) -> str | None:
    """The ``.checksum`` key of a directory: checked once for the many files it holds."""
    return _keys_problem(checksum_key(_ANY_ZARR_ID, directory))


def shard_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a shard object of a pack batch, or None when it can."""
    return _name_problem(name) or _keys_problem(new_shard_key(_ANY_ZARR_ID, str(name)))


def _name_problem(path: object) -> str | None:
    if (problem := tree_path_problem(path)) is not None:
        return problem
    if "\\" in str(path):
        return "must not contain a backslash"
    return None


def _keys_problem(*keys: str) -> str | None:
    return next((p for key in keys if (p := key_problem(key)) is not None), None)


def etag_problem(etag: object) -> str | None:
    if not is_md5(etag):
        return "must be an md5 as 32 lowercase hex digits"
    return None


def directory_problem(path: str) -> str | None:
    """Why ``path`` cannot name a directory to browse ('' is the root)."""
    path = path.strip("/")
    if path == "":
        return None
    return path_problem(path) or key_problem(checksum_key(_ANY_ZARR_ID, path))
