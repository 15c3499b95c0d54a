"""An archive's contents: its .checksum tree (cached per committed version), the pending
batches over it, and the files and directories a client browses."""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dandizarr.checksums import DirectoryListing, FileState
from dandizarr.checksums.paths import folded
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Batch, BatchFile, ZarrArchive
from dandizarr_server.zarr_api.runtime.tree import CachedTree, ListingSource, StorageChecksumTree
from dandizarr_server.zarr_api.selectors.draft_trees import archive_tree, draft_tree_cached
from dandizarr_server.zarr_api.selectors.version_trees import VersionTree, version_tree


def archive_tree_cached(archive: ZarrArchive) -> CachedTree | VersionTree:
    """The tree an archive instance reads: its draft's, or the version it was looked up as
    (``ZarrArchive.as_of``, set by the read lookups)."""
    if archive.as_of is not None:
        return version_tree(archive, archive.as_of)
    return draft_tree_cached(archive)


def pending_changes(
    archive: ZarrArchive, batch_ids: Collection[int] | None = None
) -> dict[str, FileState | None]:
    """The net effect of the archive's pending (verified, not yet applied) batches, in order
    (only of ``batch_ids`` when given)."""
    changes: dict[str, FileState | None] = {}
    for kind, path, md5, size in _pending_rows(archive, batch_ids, "md5", "size"):
        # Pending uploads were verified, which recorded their sizes (members declare theirs).
        changes[path] = None if row_removes(kind, md5) else FileState(size=size or 0, md5=md5)
    return changes


def row_removes(kind: str, md5: str) -> bool:
    """Whether a batch row removes its path: every row of a deletion, and a write session's
    rows without an md5 (its deletions; its files have one)."""
    return kind == Batch.Kind.DELETE or (kind == Batch.Kind.SESSION and not md5)


def _pending_rows(
    archive: ZarrArchive, batch_ids: Collection[int] | None, *columns: str
) -> Iterator[tuple[Any, ...]]:
    """Each pending batch row's kind, path and ``columns``, in the order they apply."""
    rows = BatchFile.objects.filter(batch__archive=archive, batch__state=Batch.State.PENDING)
    if batch_ids is not None:
        rows = rows.filter(batch_id__in=list(batch_ids))
    ordered = rows.order_by("batch__sequence", "id").values_list("batch__kind", "path", *columns)
    return ordered.iterator(chunk_size=2000)


# What ``pending_paths`` says of a path a pending batch adds: a file is there, state not read.
PENDING_FILE = FileState(size=0, md5="0" * 32)


def pending_paths(archive: ZarrArchive) -> dict[str, FileState | None]:
    """``pending_changes`` without the files' states: each path the archive's pending batches
    leave a file at maps to ``PENDING_FILE``, each they delete to None. What a start's path
    checks read: a pending pack batch of 100,000 members held as states beside the next
    batch's start was 13 MB more of md5 strings and FileStates (docs/performance.md)."""
    paths: dict[str, FileState | None] = {}
    for kind, path, md5 in _pending_rows(archive, None, "md5"):
        paths[path] = None if row_removes(kind, md5) else PENDING_FILE
    return paths


@dataclass
class ArchiveSnapshot:
    """What the archive holds once its pending batches are applied: the tree plus the overlay.

    Reads each directory's .checksum at most once, all of one call's directories in parallel.
    """

    tree: StorageChecksumTree | ListingSource
    pending: dict[str, FileState | None]

    def __post_init__(self) -> None:
        self._listings: dict[str, DirectoryListing | None] = {}
        self._folded: dict[str, dict[str, str]] = {}
        # The names pending files add to each directory (theirs, and the directories they
        # make), grouped once: a start checks many directories against them. Its keys are the
        # directories pending files make (and the root).
        self._pending_names: dict[str, list[str]] = {}
        for path, state in self.pending.items():
            if state is None:
                continue
            directory, name = posixpath.split(path)
            while True:
                known = directory in self._pending_names
                self._pending_names.setdefault(directory, []).append(name)
                if known or not directory:
                    break
                directory, name = posixpath.split(directory)

    def load(self, directories: Iterable[str]) -> None:
        missing = sorted({d for d in directories if d not in self._listings})
        if missing:
            self._listings.update(self.tree.read_many(missing))

    def file_state(self, path: str) -> FileState | None:
        if path in self.pending:
            return self.pending[path]
        parent, name = posixpath.split(path)
        listing = self._listing(parent)
        if listing is None or name not in listing.files:
            return None
        entry = listing.files[name]
        return FileState(size=entry.size, md5=entry.digest)

    def is_directory(self, path: str) -> bool:
        if path in self._pending_names:
            return True
        parent, name = posixpath.split(path)
        listing = self._listing(parent)
        return listing is not None and name in listing.directories

    def folded_names(self, directory: str) -> dict[str, str]:
        """The names in ``directory`` (files and directories, pending ones too), keyed by
        their folded form (dandizarr.checksums.paths.folded); computed once per directory."""
        if directory not in self._folded:
            listing = self._listing(directory)
            names = [*listing.files, *listing.directories] if listing is not None else []
            names += self._pending_names.get(directory, [])
            self._folded[directory] = {folded(name): name for name in names}
        return self._folded[directory]

    def _listing(self, directory: str) -> DirectoryListing | None:
        # Called per path: the usual case (loaded already) is a dict lookup.
        if directory not in self._listings:
            self.load([directory])
        return self._listings[directory]

    def files_state(self, paths: Iterable[str]) -> dict[str, FileState | None]:
        paths = list(paths)
        self.load(posixpath.dirname(p) for p in paths if p not in self.pending)
        return {path: self.file_state(path) for path in paths}


def archive_snapshot(archive: ZarrArchive, *, cached: bool = False) -> ArchiveSnapshot:
    """The archive as its pending batches will leave it. ``cached``: for the path checks of a
    start, which ask only where files and directories are: the tree's listings come from the
    read cache (safe: changes are absolute, so the overlay of pending batches gives the same
    answer over any tree version they start from), and a pending file's state is
    ``PENDING_FILE`` (``pending_paths``), not its size and md5."""
    if cached:
        return ArchiveSnapshot(archive_tree_cached(archive), pending_paths(archive))
    return ArchiveSnapshot(archive_tree(archive), pending_changes(archive))


@dataclass(frozen=True)
class FileNode:
    path: str
    size: int
    md5: str


@dataclass(frozen=True)
class DirectoryNode:
    path: str
    listing: DirectoryListing


def node_get(archive: ZarrArchive, path: str) -> FileNode | DirectoryNode:
    """A file or directory of the applied tree; one .checksum read for a directory."""
    tree = archive_tree_cached(archive)
    path = path.strip("/")
    listing = tree.read(path)
    if listing is not None:
        return DirectoryNode(path, listing)
    if path == "":
        return DirectoryNode("", DirectoryListing())
    parent, name = posixpath.split(path)
    parent_listing = tree.read(parent)
    if parent_listing is not None and name in parent_listing.files:
        entry = parent_listing.files[name]
        return FileNode(path, entry.size, entry.digest)
    raise NotFound(f"{path!r} is not in zarr archive {archive.zarr_id}", path=path)


def files_below(
    archive: ZarrArchive, directory: str, *, after: str | None = None
) -> Iterator[FileNode]:
    """Every file below ``directory`` in path order, from the tree, starting after ``after``.

    Walks the .checksum tree depth-first, skipping subtrees wholly before the cursor.
    """
    tree = archive_tree_cached(archive)

    def walk(prefix: str) -> Iterator[FileNode]:
        listing = tree.read(prefix)
        if listing is None:
            return
        entries: list[tuple[str, bool]] = [(name, False) for name in listing.files]
        entries += [(name, True) for name in listing.directories]
        # Path order: a directory's files sort as "name/..." ("/" is U+002F).
        entries.sort(key=lambda item: item[0] + "/" if item[1] else item[0])
        for name, is_dir in entries:
            path = f"{prefix}/{name}" if prefix else name
            if is_dir:
                if after is not None and after >= path + "/\U0010ffff":
                    continue
                yield from walk(path)
            elif after is None or path > after:
                entry = listing.files[name]
                yield FileNode(path, entry.size, entry.digest)

    yield from walk(directory.strip("/"))
