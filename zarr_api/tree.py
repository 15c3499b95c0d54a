"""The ``.checksum`` tree of an archive, stored next to it in object storage.

Implements ``checksums.ChecksumTree`` over an ``ObjectStore``: each level's reads and writes are
issued concurrently, and every request is counted so benchmarks can report them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from django.conf import settings

from checksums import DirectoryListing, decode_checksum_file, encode_checksum_file
from objectstore import ObjectNotFound, ObjectStore
from zarr_api.keys import checksum_key

T = TypeVar("T")
R = TypeVar("R")

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def storage_map(
    function: Callable[[T], R], items: Iterable[T], *, parallel: bool = True
) -> list[R]:
    """``map`` over one shared thread pool: storage requests in parallel, results in order.

    Shared so a request's hundreds of HEADs or .checksum writes reuse threads instead of
    starting a pool per call. ``parallel=False`` (a local-disk store) maps in this thread.
    """
    global _pool
    items = list(items)
    if len(items) <= 1 or not parallel:
        return [function(item) for item in items]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.DANDIZARR_STORAGE_CONCURRENCY, thread_name_prefix="storage"
            )
    return list(_pool.map(function, items))


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
        results = storage_map(self.read, directories, parallel=self.store.remote)
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


class ListingCache:
    """Decoded ``.checksum`` listings for reads, least recently used first out, bounded by the
    number of entries (files and subdirectories) held.

    Browsing a directory of 100,000 files reads and decodes an 8 MB object; a page of it, or a
    file entry in it, should not do that again. Keys carry the archive's ``modified`` time,
    which every tree update and audit advances after writing the tree, so an entry is never
    served for a later version of the tree.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, tuple[DirectoryListing | None, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[bool, DirectoryListing | None]:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return False, None
            self._items.move_to_end(key)
            return True, item[0]

    def put(self, key: Hashable, listing: DirectoryListing | None) -> None:
        size = 1 + (len(listing.files) + len(listing.directories) if listing else 0)
        if size > self.max_entries:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (listing, size)
            self._held += size
            while self._held > self.max_entries:
                _, (_, dropped) = self._items.popitem(last=False)
                self._held -= dropped

    def discard_where(self, stale: Callable[[Hashable], bool]) -> None:
        """Drop the entries whose key is ``stale`` (one pass over the keys)."""
        with self._lock:
            for key in [key for key in self._items if stale(key)]:
                _, size = self._items.pop(key)
                self._held -= size

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._held = 0


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
    the next update (which applies them again) reaches the same tree from either.

    Writes and deletes go to storage and are recorded, so a tree update can hand its new
    listings to the cache once committed (``remember``): the next batch start and update of
    the archive then read nothing back.
    """

    tree: StorageChecksumTree
    version: Hashable
    cache: ListingCache
    written: dict[str, DirectoryListing | None] = field(default_factory=dict, repr=False)

    @property
    def zarr_id(self) -> str:
        return self.tree.zarr_id

    def _key(self, directory: str, version: Hashable | None = None) -> Hashable:
        return (self.tree.zarr_id, self.version if version is None else version, directory)

    def read(self, directory: str) -> DirectoryListing | None:
        return self.read_many([directory])[directory]

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        """Cached listings, the others read concurrently (and cached)."""
        found: dict[str, DirectoryListing | None] = {}
        misses = []
        for directory in directories:
            hit, listing = self.cache.get(self._key(directory))
            if hit:
                found[directory] = listing
            else:
                misses.append(directory)
        for directory, listing in self.tree.read_many(misses).items():
            self.cache.put(self._key(directory), listing)
            found[directory] = listing
        return {directory: found[directory] for directory in directories}

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self.tree.write_many(listings)
        self.written.update(listings)

    def delete_many(self, directories: Sequence[str]) -> None:
        self.tree.delete_many(directories)
        self.written.update(dict.fromkeys(directories))

    def remember(self, version: Hashable) -> None:
        """Cache what was written as the listings of ``version`` (the committed new tree), in
        place of the archive's listings of older versions: readers key by the committed
        version, so those are read no more, and kept they filled half the cache (a pack batch
        of 100,000 files writes as many entries)."""
        zarr_id = self.tree.zarr_id
        self.cache.discard_where(
            lambda key: isinstance(key, tuple) and key[0] == zarr_id and key[1] != version
        )
        for directory, listing in self.written.items():
            self.cache.put(self._key(directory, version), listing)
