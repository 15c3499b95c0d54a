"""Reading an archive version (docs/versions.md, "Why a version never changes").

A version of generation g differs from the draft exactly at the paths with a FileHistory row
``until_generation >= g`` (each path's row with the smallest such generation holds its state at
g). A change commits the row recording what it replaces before the change can be seen
(dandizarr_server.zarr_api.services.file_history), so a path without such a row is, in the
draft, what it is in the version, now and later; and a directory with no such row below it is
the same listing, digests and all, in both: it is read from the draft.

Every other directory ("frozen") is computed from the rows and the draft's listings by the code
that applies batches (``changed_tree``): all of them, also those the rows leave as the draft has
them at that moment, so no later change of the draft can show through. A frozen listing is the
version's, which never changes: a process keeps it for good. What a process has frozen is keyed
by the rows it applied (the largest row id: an archive's rows are inserted under its TreeLock,
so their ids grow in commit order). A read of a directory it has not frozen asks the database,
after reading the draft, whether the archive has rows beyond those (a change made by any
process); if so, it freezes the directories they reach and reads again.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from dandizarr.checksums import (
    EMPTY_DIGEST,
    DirectoryListing,
    FileState,
    TreeSummary,
    changed_tree,
)
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.edge.exceptions import NotFound, ServiceUnavailable
from dandizarr_server.zarr_api.models import ArchiveVersion, FileHistory, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import STREAM_BLOCK, get_store
from dandizarr_server.zarr_api.runtime.tree import CachedTree
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached
from dandizarr_server.zarr_api.selectors.shard_members import MemberLocation, member_location
from dandizarr_server.zarr_api.selectors.stored_md5s import proven_etags

# Versions whose frozen listings this process keeps (each holds the listings its rows reach).
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


@dataclass(frozen=True)
class Frozen:
    """What a process knows for good of one version: the state of every path with a row, and
    the listing (None: no such directory) of every directory with such a path below it."""

    rows: Mapping[str, HistoryState]
    # The largest FileHistory id applied: rows beyond it are changes not yet frozen.
    through: int
    listings: Mapping[str, DirectoryListing | None]


@dataclass
class _FrozenOverDraft:
    """Listings as the version has them where frozen, else as the draft has them."""

    frozen: Mapping[str, DirectoryListing | None]
    draft: CachedTree

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        rest = [d for d in directories if d not in self.frozen]
        drafts = self.draft.read_many(rest) if rest else {}
        return {d: self.frozen[d] if d in self.frozen else drafts[d] for d in directories}


_frozen: OrderedDict[int, Frozen] = OrderedDict()
_frozen_lock = threading.Lock()


def _rows_after(
    archive: ZarrArchive, generation: int, after: int
) -> tuple[dict[str, HistoryState], int]:
    """Each path's state at ``generation`` among the rows with ids beyond ``after``, and the
    largest id read (``after`` when there are none)."""
    rows: dict[str, HistoryState] = {}
    last = after
    found = (
        FileHistory.objects.filter(archive=archive, until_generation__gte=generation, id__gt=after)
        .order_by("path", "until_generation")
        .values_list("id", "path", "present", "md5", "size", "key", "offset")
    )
    for row_id, path, present, md5, size, key, offset in found.iterator(chunk_size=5000):
        last = max(last, row_id)
        if path not in rows:
            rows[path] = HistoryState(present, md5, size, key, offset)
    return rows, last


def _rows_beyond(archive: ZarrArchive, generation: int, through: int) -> bool:
    return FileHistory.objects.filter(
        archive=archive, until_generation__gte=generation, id__gt=through
    ).exists()


def _freeze(
    archive: ZarrArchive, version: ArchiveVersion, known: Frozen, draft: CachedTree
) -> Frozen:
    """``known`` with the rows beyond it applied. A path that already has a row keeps it: later
    rows are of later generations, and the smallest generation's row is the version's state."""
    rows, through = _rows_after(archive, version.generation, known.through)
    added = {path: state for path, state in rows.items() if path not in known.rows}
    if not added:
        return Frozen(known.rows, through, known.listings)
    changes = {
        path: FileState(size=state.size, md5=state.md5) if state.present else None
        for path, state in added.items()
    }
    computed = changed_tree(_FrozenOverDraft(known.listings, draft), changes)
    return Frozen({**known.rows, **added}, through, {**known.listings, **computed.listings})


_NOTHING_FROZEN = Frozen({}, 0, {})


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

    def _known(self) -> Frozen | None:
        with _frozen_lock:
            found = _frozen.get(self.version.pk)
            if found is not None:
                _frozen.move_to_end(self.version.pk)
        return found

    def frozen(self) -> Frozen:
        """What this process has frozen of the version; the first time, every row applied."""
        return self._known() or self._frozen_further(_NOTHING_FROZEN)

    def _frozen_further(self, known: Frozen) -> Frozen:
        """``known`` with every row committed since applied, kept for the process's readers.
        Exact once no row beyond it exists after its draft reads: a change those reads saw
        committed its row first, and a row applied over a listing that showed the change puts
        the version's state back."""
        further = known
        for _ in range(_ATTEMPTS):
            further = _freeze(self.archive, self.version, further, self.draft)
            if _rows_beyond(self.archive, self.version.generation, further.through):
                continue
            with _frozen_lock:
                kept = _frozen.get(self.version.pk)
                # Another thread may have gone further meanwhile: what it froze is as exact.
                if kept is None or kept.through < further.through:
                    _frozen[self.version.pk] = further
                    _frozen.move_to_end(self.version.pk)
                while len(_frozen) > _KEPT_VERSIONS:
                    _frozen.popitem(last=False)
            return further
        raise ServiceUnavailable(
            f"zarr archive {self.archive.zarr_id} is changing too fast to read version "
            f"{self.version.number}; try again"
        )

    def _moved_past(self, frozen: Frozen) -> bool:
        """Whether the archive has rows beyond ``frozen`` (then the draft may have moved
        anywhere they reach): if so, they are frozen before the reader tries again."""
        if not _rows_beyond(self.archive, self.version.generation, frozen.through):
            return False
        self._frozen_further(frozen)
        return True

    def read(self, directory: str) -> DirectoryListing | None:
        return self.read_many([directory])[directory]

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        for _ in range(_ATTEMPTS):
            frozen = self.frozen()
            rest = [d for d in directories if d not in frozen.listings]
            drafts = self.draft.read_many(rest) if rest else {}
            # Frozen listings are final; the draft's are the version's only if no change
            # reached them (no row beyond those frozen).
            if rest and self._moved_past(frozen):
                continue
            return {
                d: frozen.listings[d] if d in frozen.listings else drafts[d] for d in directories
            }
        raise ServiceUnavailable(
            f"zarr archive {self.archive.zarr_id} is changing too fast to read version "
            f"{self.version.number}; try again"
        )

    def summary(self) -> TreeSummary:
        """The version's root, as computed here (``version.checksum`` is what was published:
        the audit compares the two)."""
        root = self.read("")
        return TreeSummary(*root.summary()) if root is not None else TreeSummary(EMPTY_DIGEST, 0, 0)

    def locate(self, path: str, md5: str, size: int) -> MemberLocation:
        """Where the bytes of file ``path`` (``md5``, ``size`` in this version's listing) are."""
        found = self.find_file(path, (md5, size))
        if found is None:
            raise NotFound(f"{path!r} is not in version {self.version.number}")
        return found[1]

    def find_file(
        self, path: str, known: tuple[str, int] | None = None, *, current: bool = False
    ) -> FoundFile | None:
        """File ``path`` of this version, ``((md5, size), where its bytes are)``, or None;
        its listing entry read here unless ``known``. Found once per process (``_located``);
        the first time, a path with a row is answered by it (final), any other costs one check
        for newer rows. ``current``: a loose file the draft still holds may be located as the
        key's current object while its ETag is the file's md5 (``if_match``: one storage
        request, no version to look up), its reader asking again (``forget``) if it is not."""
        with _frozen_lock:
            hit = _located.get((self.version.version_id, path), _UNKNOWN)
            if hit is not _UNKNOWN:
                _located.move_to_end((self.version.version_id, path))
        if hit is _UNKNOWN:
            found = self._find_file(path, known, current)
        elif hit is None or current or hit[1].if_match is None:
            return hit
        else:
            entry, where = hit
            found = entry, _loose(where.key, *entry)
        with _frozen_lock:
            _located[self.version.version_id, path] = found
            while len(_located) > _LOCATED:
                _located.popitem(last=False)
        return found

    def forget(self, path: str) -> None:
        """What this process found of ``path``, dropped: its bytes were not there (the draft
        replaced the current object it named, or discarded the shard)."""
        with _frozen_lock:
            _located.pop((self.version.version_id, path), None)

    def _find_file(
        self, path: str, known: tuple[str, int] | None, current: bool
    ) -> FoundFile | None:
        parent, _, name = path.rpartition("/")
        for _ in range(_ATTEMPTS):
            frozen = self.frozen()
            state = frozen.rows.get(path)
            if state is not None:
                if not state.present:
                    return None
                entry = (state.md5, state.size)
                if state.offset is not None:
                    return entry, _shard_range(state)
                return entry, _loose(state.key, state.md5, state.size)
            # No row: the draft's file is the version's, where the draft keeps it now.
            member = member_location(self.archive, path)
            found = known
            if found is None and member is not None:
                # A packed file's row has its md5 and size, as its listing entry does (member
                # rows change with the applied tree): no listing read, as for a draft's read.
                found = (member.md5, member.length)
            if found is None:
                listing = (
                    frozen.listings[parent]
                    if parent in frozen.listings
                    else self.draft.read(parent)
                )
                file = listing.files.get(name) if listing is not None else None
                found = (file.digest, file.size) if file is not None else None
            if self._moved_past(frozen):
                continue
            if found is None:
                return None
            if member is not None:
                return found, member
            return found, _loose(file_key(self.archive.zarr_id, path), *found, current=current)
        raise ServiceUnavailable(f"zarr archive {self.archive.zarr_id} is changing; try again")


FoundFile = tuple[tuple[str, int], MemberLocation]
# Where each file of a version is, as this process found it, by (version, path): a version
# never changes, so each answer holds for good, except where the bytes turn out not to be
# (a current object the draft since replaced, a shard it discarded: ``VersionTree.forget``).
_located: OrderedDict[tuple[uuid.UUID, str], FoundFile | None] = OrderedDict()
_LOCATED = 50_000
_UNKNOWN: Any = object()


# (key, md5) -> the id of the object version with those bytes: immutable facts (a version's
# bytes never change, and one a version reads is never collected), found once per process.
_resolved: OrderedDict[tuple[str, str], str] = OrderedDict()
_RESOLVED_ENTRIES = 100_000
_OBJECT_VERSION = "dandizarr:object-version:"
_OBJECT_VERSION_SECONDS = 30 * 24 * 3600


def _loose(key: str, md5: str, size: int, *, current: bool = False) -> MemberLocation:
    """A loose file's bytes: the version of its key with that md5, by id, so a read is exact
    whatever the draft writes to the key meanwhile. Found once (this process's ``_resolved``,
    then the shared cache every process sees), by listing the key's versions; with
    ``current``, until then, the key's current object on condition that it holds those bytes
    (``if_match``)."""
    with _frozen_lock:
        version_id = _resolved.get((key, md5))
    shared = _OBJECT_VERSION + hashlib.sha256(f"{key}\0{md5}".encode()).hexdigest()
    if version_id is None:
        version_id = cache.get(shared)
    if version_id is None and current and size <= STREAM_BLOCK:
        # One request reads it all (a longer file's later requests could find it replaced).
        return MemberLocation(key, 0, size, md5, if_match=md5)
    if version_id is None:
        found = get_store().find_version(key, md5)
        for etag in proven_etags(key, md5) if found is None else []:
            # Sent in parts: its ETag is not its md5, the proven row names it.
            if (found := get_store().find_version(key, etag)) is not None:
                break
        if found is None:
            raise NotFound(f"the bytes of {key!r} (md5 {md5}) are gone from storage")
        version_id = found.version_id
        cache.set(shared, version_id, _OBJECT_VERSION_SECONDS)
    with _frozen_lock:
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
