"""Where a file's bytes are (loose object or shard range), for the plain-HTTP reads and the
manifest (dandizarr_server.zarr_api.views.reads)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from dandizarr_server.zarr_api.exceptions import NotFound
from dandizarr_server.zarr_api.keys import file_key
from dandizarr_server.zarr_api.models import ShardMember, ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree_cached


@dataclass(frozen=True)
class StoredBytes:
    """A file's bytes: ``size`` bytes at ``offset`` of object ``key`` (a packed file's: its
    shard's), and their md5."""

    key: str
    offset: int
    size: int
    md5: str


def member_locations(archive: ZarrArchive, paths: Iterable[str]) -> dict[str, StoredBytes]:
    """The packed files among ``paths`` and where their bytes are (one query per 1000 paths).
    Member rows change in the transaction that applies a batch to the tree, so they agree with
    the applied tree."""
    paths = list(paths)
    found: dict[str, StoredBytes] = {}
    for start in range(0, len(paths), 1000):
        rows = ShardMember.objects.filter(
            archive=archive, path__in=paths[start : start + 1000]
        ).values_list("path", "shard__key", "offset", "length", "md5")
        for path, key, offset, length, md5 in rows:
            found[path] = StoredBytes(key, offset, length, md5)
    return found


def stored_bytes(archive: ZarrArchive, path: str) -> StoredBytes:
    """Where file ``path`` of the applied tree is. A packed file costs one database query and
    no storage request; a loose file also reads its directory's listing (through the
    process's listing cache)."""
    member = member_locations(archive, [path]).get(path)
    if member is not None:
        return member
    parent, name = posixpath.split(path)
    listing = archive_tree_cached(archive).read(parent)
    entry = listing.files.get(name) if listing is not None else None
    if entry is None:
        raise NotFound(f"{path!r} is not a file of zarr archive {archive.zarr_id}", path=path)
    return StoredBytes(file_key(archive.zarr_id, path), 0, entry.size, entry.digest)
