"""The ``.checksum`` tree of an archive, stored next to it in object storage.

Implements ``checksums.ChecksumTree`` over an ``ObjectStore``: each level's reads and writes are
issued concurrently, and every request is counted so benchmarks can report them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

from dandizarr.checksums import DirectoryListing, decode_checksum_file, encode_checksum_file
from dandizarr.checksums.paths import depth
from dandizarr.objectstore import ObjectNotFound, ObjectStore
from dandizarr_server.zarr_api.domain.keys import checksum_key

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class StorageChecksumTree:
    store: ObjectStore
    zarr_id: str
    reads: int = 0
    writes: int = 0
    deletes: int = 0
    _counter_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # Totals over every tree in this process, for benchmarks and metrics.
    total_reads: ClassVar[int] = 0
    total_writes: ClassVar[int] = 0

    def _count(self, reads: int = 0, writes: int = 0, deletes: int = 0) -> None:
        with self._counter_lock:
            self.reads += reads
            self.writes += writes
            self.deletes += deletes
            StorageChecksumTree.total_reads += reads
            StorageChecksumTree.total_writes += writes

    def read(self, directory: str) -> DirectoryListing | None:
        self._count(reads=1)
        try:
            data = self.store.get(checksum_key(self.zarr_id, directory))
        except ObjectNotFound:
            return None
        return decode_checksum_file(data)

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        results = self.store.map_requests(self.read, list(directories))
        return dict(zip(directories, results, strict=True))

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self._count(writes=len(listings))
        self.store.put_many(
            {checksum_key(self.zarr_id, d): encode_checksum_file(v) for d, v in listings.items()}
        )

    def delete_many(self, directories: Sequence[str]) -> None:
        if directories:
            self._count(deletes=len(directories))
            self.store.delete_many([checksum_key(self.zarr_id, d) for d in directories])


class ListingSource(Protocol):
    """What reads an archive's listings: a draft's tree (CachedTree) or a version's
    (dandizarr_server.zarr_api.selectors.version_trees.VersionTree)."""

    def read(self, directory: str) -> DirectoryListing | None: ...

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]: ...


# A cached listing's key: (zarr_id, tree version, directory).
CacheKey = tuple[str, Hashable, str]


class ListingCache:
    """Decoded ``.checksum`` listings for reads, least recently used first out, bounded by the
    bytes they hold in memory (estimated from their entries and names: ``listing_bytes``).

    Browsing a directory of 100,000 files reads and decodes an 8 MB object; a page of it, or a
    file entry in it, should not do that again. Keys carry the archive's tree version, which
    every tree update and audit advances after writing the tree, so an entry is never served
    for a later version of the tree unless ``carry`` moved it there.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[CacheKey, tuple[DirectoryListing | None, int]] = OrderedDict()
        # The directories held of each (zarr_id, version): what ``carry`` moves.
        self._by_version: dict[tuple[str, Hashable], set[str]] = {}
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> tuple[bool, DirectoryListing | None]:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return False, None
            self._items.move_to_end(key)
            return True, item[0]

    def put(self, key: CacheKey, listing: DirectoryListing | None) -> None:
        with self._lock:
            self._put(key, listing)

    def carry(
        self,
        zarr_id: str,
        old: Hashable,
        new: Hashable,
        written: Mapping[str, DirectoryListing | None],
    ) -> None:
        """Version ``new`` is version ``old`` with ``written`` (None: deleted) and nothing else
        changed: what was held of ``old`` and not rewritten becomes ``new``'s, and
        ``written`` is ``new``'s own. Only a tree update that read its listings at ``old`` and
        committed ``new`` under the TreeLock may say so: nothing else changes a tree between
        two of its versions."""
        with self._lock:
            for directory in self._by_version.pop((zarr_id, old), set()):
                listing, size = self._items.pop((zarr_id, old, directory))
                self._held -= size
                if directory not in written:
                    self._put((zarr_id, new, directory), listing)
            # Listings of the archive's other versions: readers key by the committed version,
            # so they are read no more, and kept they filled half the cache (a pack batch of
            # 100,000 files writes as many entries).
            for scope in [s for s in self._by_version if s[0] == zarr_id and s[1] != new]:
                self._drop(scope)
            for directory, listing in written.items():
                self._put((zarr_id, new, directory), listing)

    def forget(self, zarr_id: str) -> None:
        """Drop every listing of the archive (its storage may be ahead of any version)."""
        with self._lock:
            for scope in [s for s in self._by_version if s[0] == zarr_id]:
                self._drop(scope)

    def _drop(self, scope: tuple[str, Hashable]) -> None:
        """Drop every listing of one version of an archive (the lock held)."""
        for directory in self._by_version.pop(scope):
            _, size = self._items.pop((*scope, directory))
            self._held -= size

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._by_version.clear()
            self._held = 0

    def _put(self, key: CacheKey, listing: DirectoryListing | None) -> None:
        if key in self._items:
            return
        size = listing_bytes(listing)
        if size > self.max_bytes:
            return
        self._items[key] = (listing, size)
        self._by_version.setdefault(key[:2], set()).add(key[2])
        self._held += size
        while self._held > self.max_bytes:
            (zarr_id, version, directory), (_, dropped) = self._items.popitem(last=False)
            held = self._by_version[zarr_id, version]
            held.discard(directory)
            if not held:
                del self._by_version[zarr_id, version]
            self._held -= dropped


# What a decoded listing holds in memory, measured (tracemalloc) on listings of a packed
# archive: a file entry about 240 bytes besides its name (the entry, its md5 as a str, its size,
# its slot in the listing's dict), a directory entry about 360 (its digest, md5 and count too).
_LISTING_BYTES = 200
_FILE_ENTRY_BYTES = 240
_DIRECTORY_ENTRY_BYTES = 360


def listing_bytes(listing: DirectoryListing | None) -> int:
    """About how many bytes ``listing`` (decoded) holds in memory."""
    if listing is None:
        return _LISTING_BYTES
    files, directories = listing.files, listing.directories
    return (
        _LISTING_BYTES
        + _FILE_ENTRY_BYTES * len(files)
        + sum(map(len, files))
        + _DIRECTORY_ENTRY_BYTES * len(directories)
        + sum(map(len, directories))
    )


def tree_version(modified: Hashable, checksum: str) -> Hashable:
    """The key of one committed state of an archive's tree (see CachedTree)."""
    return (modified, checksum)


@dataclass
class CachedTree:
    """One version of an archive's tree, its listings read through the process's ListingCache.

    The version is the archive's ``(modified, checksum)``: every tree update and audit advances
    ``modified`` when it commits a new tree, and the checksum (a hash over the whole tree) names
    its content. An entry can only be ahead of its version by a tree update that has written
    but not committed; such an update applies pending batches, whose changes are absolute, so
    the next update (which applies them again) reaches the same tree from either. An update
    that fails in this process drops the archive's entries (``forget``).

    Writes and deletes go to storage and are recorded, so a tree update can hand them to the
    cache once committed (``remember``), with every listing it did not change carried over to
    the new version: the next batch start and update of the archive then read nothing back.
    """

    tree: StorageChecksumTree
    version: Hashable
    cache: ListingCache
    written: dict[str, DirectoryListing | None] = field(default_factory=dict, repr=False)

    @property
    def zarr_id(self) -> str:
        return self.tree.zarr_id

    def _key(self, directory: str) -> CacheKey:
        return (self.tree.zarr_id, self.version, directory)

    def read(self, directory: str) -> DirectoryListing | None:
        return self.read_many([directory])[directory]

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        """Cached listings, the others read concurrently (and cached).

        A directory whose parent's listing is known (cached, or found absent here) and does
        not name it has no ``.checksum``: it is not asked of storage. In one version every
        directory of the tree is named by its parent, so such an answer is that version's.
        """
        found: dict[str, DirectoryListing | None] = {}
        misses = []
        # Parents before their children, so an absent parent makes its children absent too.
        for directory in sorted(set(directories), key=depth):
            hit, listing = self.cache.get(self._key(directory))
            if not hit and directory and self._absent_from_parent(directory, found):
                hit, listing = True, None
                self.cache.put(self._key(directory), None)
            if hit:
                found[directory] = listing
            else:
                misses.append(directory)
        for directory, listing in self.tree.read_many(misses).items():
            self.cache.put(self._key(directory), listing)
            found[directory] = listing
        return {directory: found[directory] for directory in directories}

    def _absent_from_parent(
        self, directory: str, found: Mapping[str, DirectoryListing | None]
    ) -> bool:
        up, _, name = directory.rpartition("/")
        if up in found:
            listing = found[up]
        else:
            hit, listing = self.cache.get(self._key(up))
            if not hit:
                return False
        return listing is None or name not in listing.directories

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self.tree.write_many(listings)
        self.written.update(listings)

    def delete_many(self, directories: Sequence[str]) -> None:
        self.tree.delete_many(directories)
        self.written.update(dict.fromkeys(directories))

    def remember(self, version: Hashable) -> None:
        """``version`` (just committed) is this one plus what was written: cache it so."""
        self.cache.carry(self.tree.zarr_id, self.version, version, self.written)

    def forget(self) -> None:
        """This update wrote but did not commit: storage may be ahead of every cached version."""
        self.cache.forget(self.tree.zarr_id)


def absent_files(tree: ListingSource, paths: Collection[str]) -> set[str]:
    """Which of ``paths`` are no file of ``tree``: their directory (or one above it) has no
    listing, or its listing does not name them. Parents are read before children, so an
    absent directory answers for everything below it (a sparse array's never-written chunks
    cost listing reads of the directories that exist, not a storage read each)."""
    directories: set[str] = set()
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent not in directories:
            directories.add(parent)
            if not parent:
                break
            parent = parent.rpartition("/")[0]
    listings = tree.read_many(sorted(directories, key=depth))
    absent = set()
    for path in paths:
        directory, _, name = path.rpartition("/")
        listing = listings[directory]
        if listing is None or name not in listing.files:
            absent.add(path)
    return absent
