"""The draft's .checksum tree of an archive, its listings through this process's cache."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings

from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.runtime.tree import (
    CachedTree,
    ListingCache,
    StorageChecksumTree,
    tree_version,
)


def archive_tree(archive: ZarrArchive) -> StorageChecksumTree:
    return StorageChecksumTree(get_store(), str(archive.zarr_id))


# Decoded .checksum listings of this process (web or worker), bounded by entries.
_listing_cache: ListingCache | None = None


def draft_tree_cached(archive: ZarrArchive) -> CachedTree:
    """The draft's tree as of the row read, listings through this process's cache. Read the
    row under the archive's TreeLock before a tree update, or under its row lock for the
    path checks of a batch start."""
    global _listing_cache
    if _listing_cache is None:
        _listing_cache = ListingCache(settings.DANDIZARR_LISTING_CACHE_BYTES)
    return CachedTree(
        archive_tree(archive), tree_version(archive.modified, archive.checksum), _listing_cache
    )


def paths_in_tree(tree: CachedTree, paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` are files of ``tree`` (one read of each parent directory)."""
    names: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        directory, _, name = path.rpartition("/")
        names[directory].append(name)
    listings = tree.read_many(sorted(names))
    found: set[str] = set()
    for directory, in_directory in names.items():
        listing = listings.get(directory)
        if listing is not None:
            files = listing.files
            found.update(f"{directory}/{n}" if directory else n for n in in_directory if n in files)
    return found
