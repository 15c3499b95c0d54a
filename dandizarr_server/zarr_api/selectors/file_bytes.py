"""Where a file's bytes are (loose object or shard range), for the plain-HTTP reads and the
manifest (dandizarr_server.zarr_api.views.reads)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree_cached
from dandizarr_server.zarr_api.selectors.shard_members import MemberLocation, member_location
from dandizarr_server.zarr_api.selectors.version_trees import VersionTree


@dataclass(frozen=True)
class StoredBytes:
    """A file's bytes: ``size`` bytes at ``offset`` of object ``key`` (a packed file's: its
    shard's), and their md5."""

    key: str
    offset: int
    size: int
    md5: str
    # Not the object's current version (an archive version's bytes the draft replaced).
    version_id: str | None = None
    # The current object, if its ETag is this still (shard_members.MemberLocation.if_match).
    if_match: str | None = None


def stored_bytes(
    archive: ZarrArchive, path: str, *, current: bool = False, again: bool = False
) -> StoredBytes:
    """Where file ``path`` of the applied tree is. A packed file costs one database query and
    no storage request; a loose file also reads its directory's listing (through the
    process's listing cache). A version's file is found once per process
    (``VersionTree.find_file``; ``current``: possibly as the current object on condition,
    ``if_match``); ``again``: what the process knew of it was wrong (its bytes were not
    there), found anew."""
    tree = archive_tree_cached(archive)
    if isinstance(tree, VersionTree):
        if again:
            tree.forget(path)
        found = tree.find_file(path, current=current)
        if found is None:
            raise NotFound(
                f"{path!r} is not a file of version {tree.version.number} of zarr archive "
                f"{archive.zarr_id}",
                path=path,
            )
        (md5, size), where = found
        return StoredBytes(where.key, where.offset, size, md5, where.version_id, where.if_match)
    member = member_location(archive, path)
    if member is not None:
        return StoredBytes(member.key, member.offset, member.length, member.md5)
    parent, name = posixpath.split(path)
    listing = tree.read(parent)
    entry = listing.files.get(name) if listing is not None else None
    if entry is None:
        raise NotFound(f"{path!r} is not a file of zarr archive {archive.zarr_id}", path=path)
    return StoredBytes(file_key(archive.zarr_id, path), 0, entry.size, entry.digest)


def file_location(archive: ZarrArchive, path: str) -> MemberLocation:
    """``stored_bytes`` as a location to read (``iter_member_bytes``)."""
    found = stored_bytes(archive, path)
    return MemberLocation(
        found.key, found.offset, found.size, found.md5, found.version_id, found.if_match
    )
