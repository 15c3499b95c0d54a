"""An archive's files as a ``dandizarr.sharding.store.KeyValueStore`` (read-only), by archive path.

A loose file is its object under the archive's prefix; a packed file (sharded archives,
docs/sharded.md) is a byte range of its shard object, and a range of it is the same range
shifted into the shard. So the sharding library's ``Array`` reads any archive's arrays, packed
or not, with one storage request per chunk (two for a ``sharding_indexed`` chunk: its index and
its inner chunks).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dandizarr.objectstore import ObjectStore
from dandizarr.sharding.store import ObjectStoreKV, RangeRead
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.tree import absent_files
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree_cached
from dandizarr_server.zarr_api.selectors.file_bytes import file_location
from dandizarr_server.zarr_api.selectors.shard_members import (
    MemberLocation,
    member_location,
    member_locations,
)

# A path that is no file of the version read (a chunk never written: the fill value).
_ABSENT = MemberLocation("", 0, 0)


class ReadBudgetExceeded(ValueError):
    """A read would start after the reader's deadline."""


@dataclass
class ArchiveFiles:
    """Reads of archive ``archive``'s files; ``prefetch`` looks up many packed files at once."""

    archive: ZarrArchive
    store: ObjectStore
    # time.monotonic() after which no more reads start (a preview's time budget).
    deadline: float | None = None
    # Reads made (each one storage request).
    reads: int = 0
    _locations: dict[str, MemberLocation | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._loose = ObjectStoreKV(self.store, self.archive.storage_prefix)
        self._shards = ObjectStoreKV(self.store)

    def prefetch(self, paths: Iterable[str]) -> None:
        """Where each of ``paths`` is, in one query per thousand (loose archives: none)."""
        wanted = [p for p in paths if p not in self._locations]
        if self.archive.as_of is not None:
            return  # a version's files are found one by one (version_trees)
        if self.archive.layout == ZarrArchive.Layout.LOOSE:
            # Files the tree does not name are not asked of storage (a sparse array's chunks).
            absent = absent_files(archive_tree_cached(self.archive), wanted)
            self._locations.update({p: _ABSENT if p in absent else None for p in wanted})
            return
        self._locations.update(dict.fromkeys(wanted))
        self._locations.update(member_locations(self.archive, wanted))

    def _location(self, path: str) -> MemberLocation | None:
        if path not in self._locations and self.archive.as_of is not None:
            # A version's file: wherever the draft left its bytes (any file, loose or packed).
            try:
                self._locations[path] = file_location(self.archive, path)
            except NotFound:
                self._locations[path] = _ABSENT
        if path not in self._locations:
            self._locations[path] = (
                None
                if self.archive.layout == ZarrArchive.Layout.LOOSE
                else member_location(self.archive, path)
            )
        return self._locations[path]

    def _start_read(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ReadBudgetExceeded(f"reading stopped after {self.reads} reads: out of time")
        self.reads += 1

    def get(self, key: str) -> bytes | None:
        self._start_read()
        location = self._location(key)
        if location is None:
            return self._loose.get(key)
        if location is _ABSENT:
            return None
        if location.version_id is not None:
            return self._version_range(
                location, location.offset, location.offset + location.length
            ).data
        got = self._shards.get_range(
            location.key, location.offset, location.offset + location.length
        )
        return None if got is None else got.data

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        self._start_read()
        location = self._location(key)
        if location is None:
            return self._loose.get_range(key, start, end, if_version=if_version)
        stop = location.offset + location.length
        if start < 0 and end is None:
            first = max(location.offset, stop + start)
        else:
            first = min(location.offset + start, stop)
            stop = stop if end is None else min(location.offset + end, stop)
        if location is _ABSENT:
            return None
        if location.version_id is not None:
            return self._version_range(location, first, stop)
        return self._shards.get_range(location.key, first, stop, if_version=if_version)

    def _version_range(self, location: MemberLocation, first: int, stop: int) -> RangeRead:
        """Bytes of an object version the draft replaced (its versions never change)."""
        assert location.version_id is not None
        data = self.store.get_version_range(location.key, location.version_id, first, stop)
        return RangeRead(data, location.version_id)

    def set(self, key: str, value: bytes) -> None:
        raise PermissionError("archive files are read-only here")

    def delete(self, key: str) -> None:
        raise PermissionError("archive files are read-only here")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        raise NotImplementedError("list archives through their .checksum tree")
