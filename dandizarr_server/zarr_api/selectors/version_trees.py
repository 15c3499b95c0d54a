"""Reading an archive version (docs/versions.md): the draft's tree with FileHistory over it.

A version of generation g differs from the draft exactly at the paths with a FileHistory row
``until_generation >= g`` (each path's row with the smallest such generation holds its state at
g). Its listings are the draft's with those states applied, computed by the same code that
applies batches (``apply_changes``) into memory, so their digests are exact: the root's must be
the version's recorded checksum.

Consistency without locks: a tree update commits its rows before it writes a listing
(dandizarr_server.zarr_api.services.file_history). A reader reads the draft's listings, then asks
whether rows newer than those it applied exist; if none do, every change those listings show is
undone by a row it applied. Otherwise it starts again with the new rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dandizarr.checksums import DirectoryListing, FileState, TreeSummary, apply_changes
from dandizarr_server.zarr_api.exceptions import NotFound, ServiceUnavailable
from dandizarr_server.zarr_api.keys import file_key
from dandizarr_server.zarr_api.models import ArchiveVersion, FileHistory, ZarrArchive
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached
from dandizarr_server.zarr_api.selectors.shard_members import MemberLocation, member_location
from dandizarr_server.zarr_api.storage import get_store
from dandizarr_server.zarr_api.tree import CachedTree

# Versions whose overlays this process keeps (each holds the listings its changes touch).
_KEPT_VERSIONS = 16
# A reader racing tree updates starts again at most this often, then answers 503.
_ATTEMPTS = 5


@dataclass(frozen=True)
class HistoryState:
    """A path's state at a version, from its FileHistory row."""

    present: bool
    md5: str
    size: int
    key: str
    offset: int | None


@dataclass
class Overlay:
    """The rows of a version applied over the draft: the listings they change."""

    rows: dict[str, HistoryState]
    last_row_id: int
    listings: dict[str, DirectoryListing | None]
    summary: TreeSummary


@dataclass
class _MemoryTree:
    """A ChecksumTree that reads the draft and keeps its writes in memory."""

    base: CachedTree
    written: dict[str, DirectoryListing | None] = field(default_factory=dict)

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        return self.base.read_many(directories)

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self.written.update(listings)

    def delete_many(self, directories: Sequence[str]) -> None:
        self.written.update(dict.fromkeys(directories))


_overlays: OrderedDict[int, Overlay] = OrderedDict()
_overlays_lock = threading.Lock()


def _rows_at(archive: ZarrArchive, generation: int) -> tuple[dict[str, HistoryState], int]:
    rows: dict[str, HistoryState] = {}
    last = 0
    found = (
        FileHistory.objects.filter(archive=archive, until_generation__gte=generation)
        .order_by("path", "until_generation")
        .values_list("id", "path", "present", "md5", "size", "key", "offset")
    )
    for row_id, path, present, md5, size, key, offset in found.iterator(chunk_size=5000):
        last = max(last, row_id)
        if path not in rows:
            rows[path] = HistoryState(present, md5, size, key, offset)
    return rows, last


def _newer_rows(archive: ZarrArchive, generation: int, last_row_id: int) -> bool:
    return FileHistory.objects.filter(
        archive=archive, until_generation__gte=generation, id__gt=last_row_id
    ).exists()


def _overlay(archive: ZarrArchive, version: ArchiveVersion, draft: CachedTree) -> Overlay:
    rows, last = _rows_at(archive, version.generation)
    changes = {
        path: FileState(size=state.size, md5=state.md5) if state.present else None
        for path, state in rows.items()
    }
    memory = _MemoryTree(draft)
    summary = apply_changes(memory, changes) if changes else _draft_summary(archive)
    return Overlay(rows, last, memory.written, summary)


def _draft_summary(archive: ZarrArchive) -> TreeSummary:
    return TreeSummary(archive.checksum, archive.file_count, archive.size)


@dataclass
class VersionTree:
    """The tree of one version (reads only), with the draft's ``read``/``read_many``."""

    archive: ZarrArchive
    version: ArchiveVersion

    def __post_init__(self) -> None:
        self.draft = draft_tree_cached(self.archive)

    @property
    def zarr_id(self) -> str:
        return str(self.archive.zarr_id)

    def overlay(self) -> Overlay:
        with _overlays_lock:
            found = _overlays.get(self.version.pk)
            if found is not None:
                _overlays.move_to_end(self.version.pk)
        if found is None:
            found = _overlay(self.archive, self.version, self.draft)
            self._keep(found)
        return found

    def _keep(self, overlay: Overlay) -> None:
        with _overlays_lock:
            _overlays[self.version.pk] = overlay
            while len(_overlays) > _KEPT_VERSIONS:
                _overlays.popitem(last=False)

    def _stale(self, overlay: Overlay) -> bool:
        if not _newer_rows(self.archive, self.version.generation, overlay.last_row_id):
            return False
        with _overlays_lock:
            _overlays.pop(self.version.pk, None)
        return True

    def read(self, directory: str) -> DirectoryListing | None:
        return self.read_many([directory])[directory]

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        for _ in range(_ATTEMPTS):
            overlay = self.overlay()
            rest = [d for d in directories if d not in overlay.listings]
            drafts = self.draft.read_many(rest) if rest else {}
            if self._stale(overlay):
                continue
            return {
                d: overlay.listings[d] if d in overlay.listings else drafts[d] for d in directories
            }
        raise ServiceUnavailable(
            f"zarr archive {self.archive.zarr_id} is changing too fast to read version "
            f"{self.version.number}; try again"
        )

    def summary(self) -> TreeSummary:
        return self.overlay().summary

    def locate(self, path: str, md5: str, size: int) -> MemberLocation:
        """Where the bytes of file ``path`` (``md5``, ``size`` in this version's listing) are."""
        found = self.find_file(path, (md5, size))
        if found is None:
            raise NotFound(f"{path!r} is not in version {self.version.number}")
        return found[1]

    def find_file(
        self, path: str, known: tuple[str, int] | None = None
    ) -> tuple[tuple[str, int], MemberLocation] | None:
        """File ``path`` of this version, ``((md5, size), where its bytes are)``, or None;
        its listing entry read here unless ``known``. One check for newer rows in all."""
        parent, _, name = path.rpartition("/")
        for _ in range(_ATTEMPTS):
            overlay = self.overlay()
            state = overlay.rows.get(path)
            entry = known
            if state is None and entry is None:
                listing = (
                    overlay.listings[parent]
                    if parent in overlay.listings
                    else self.draft.read(parent)
                )
                file = listing.files.get(name) if listing is not None else None
                entry = (file.digest, file.size) if file is not None else None
            member = None if state is not None else member_location(self.archive, path)
            if self._stale(overlay):
                continue
            if state is not None:
                if not state.present:
                    return None
                entry = (state.md5, state.size)
                if state.offset is not None:
                    return entry, _shard_range(state)
                return entry, _loose(state.key, state.md5, state.size)
            if entry is None:
                return None
            if member is not None:
                return entry, member
            return entry, _loose(file_key(self.archive.zarr_id, path), *entry)
        raise ServiceUnavailable(f"zarr archive {self.archive.zarr_id} is changing; try again")


# (key, md5) -> the id of the object version with those bytes: immutable facts (a version's
# bytes never change, and one a version reads is never collected), found once per process.
_resolved: OrderedDict[tuple[str, str], str] = OrderedDict()
_RESOLVED_ENTRIES = 100_000


def _loose(key: str, md5: str, size: int) -> MemberLocation:
    """A loose file's bytes: the version of its key with that md5, by id, so a read is exact
    whatever the draft writes to the key meanwhile."""
    with _overlays_lock:
        version_id = _resolved.get((key, md5))
    if version_id is None:
        found = get_store().find_version(key, md5)
        if found is None:
            raise NotFound(f"the bytes of {key!r} (md5 {md5}) are gone from storage")
        version_id = found.version_id
        with _overlays_lock:
            _resolved[key, md5] = version_id
            while len(_resolved) > _RESOLVED_ENTRIES:
                _resolved.popitem(last=False)
    return MemberLocation(key, 0, size, md5, version_id=version_id)


def _shard_range(state: HistoryState) -> MemberLocation:
    """A packed file's bytes in a shard object the draft may since have discarded (shard
    objects are never overwritten: its newest kept version is it)."""
    assert state.offset is not None
    store = get_store()
    version_id = None
    if store.head(state.key) is None:
        found = store.find_version(state.key, None)
        if found is None:
            raise NotFound(f"shard object {state.key!r} is gone from storage")
        version_id = found.version_id
    return MemberLocation(state.key, state.offset, state.size, state.md5, version_id=version_id)


def version_tree(archive: ZarrArchive, version: ArchiveVersion) -> VersionTree:
    return VersionTree(archive, version)
