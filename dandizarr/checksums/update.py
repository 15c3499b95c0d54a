"""Incremental updates of a stored tree of ``.checksum`` files for a batch of file changes.

Every affected directory (the parents of the changed paths and all their ancestors) is read
in one ``read_many`` call, the new listings are computed in memory bottom-up, and only then,
once the whole batch is known to be consistent, written level by level, deepest first: a
crash half-way leaves children newer than parents, never the reverse. A parent's entry for a
child is always set from the child's freshly computed listing (never adjusted by deltas), so
re-applying a batch, complete or interrupted, converges to the same tree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dandizarr.checksums.listing import (
    EMPTY_DIGEST,
    ChecksumFormatError,
    DirectoryEntry,
    DirectoryListing,
    _file_entry,
    check_md5,
    check_size,
    decode_checksum_file,
    encode_checksum_file,
)
from dandizarr.checksums.paths import ancestors, basename, check_path, depth, parent
from dandizarr.checksums.tree import TreeSummary


class ChecksumTree(Protocol):
    """Storage of ``.checksum`` files by directory path ("" = the archive root)."""

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        """Each directory's listing, or None where there is no .checksum."""
        ...

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None: ...

    def delete_many(self, directories: Sequence[str]) -> None: ...


@dataclass
class MemoryChecksumTree:
    """``.checksum`` files as encoded bytes in a dict, with request counters."""

    files: dict[str, bytes] = field(default_factory=dict)
    read_calls: int = 0
    reads: int = 0
    write_calls: int = 0
    writes: int = 0
    delete_calls: int = 0
    deletes: int = 0

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        self.read_calls += 1
        self.reads += len(directories)
        result: dict[str, DirectoryListing | None] = {}
        for directory in directories:
            data = self.files.get(directory)
            result[directory] = None if data is None else decode_checksum_file(data)
        return result

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self.write_calls += 1
        self.writes += len(listings)
        for directory, listing in listings.items():
            self.files[directory] = encode_checksum_file(listing)

    def delete_many(self, directories: Sequence[str]) -> None:
        self.delete_calls += 1
        self.deletes += len(directories)
        for directory in directories:
            self.files.pop(directory, None)

    def reset_counters(self) -> None:
        self.read_calls = self.reads = self.write_calls = self.writes = 0
        self.delete_calls = self.deletes = 0

    def listings(self) -> Iterator[tuple[str, DirectoryListing]]:
        for directory in sorted(self.files):
            yield directory, decode_checksum_file(self.files[directory])


@dataclass(frozen=True, slots=True)
class FileState:
    size: int
    md5: str

    def __post_init__(self) -> None:
        check_size(self.size, "file state")
        check_md5(self.md5, "file state")


def _group_changes(
    changes: Mapping[str, FileState | None],
) -> dict[str, dict[str, FileState | None]]:
    """directory -> {file name -> new state}, paths and states validated."""
    by_directory: dict[str, dict[str, FileState | None]] = {}
    for path, state in changes.items():
        check_path(path)
        if state is not None and not isinstance(state, FileState):
            raise ChecksumFormatError(f"{path!r}: expected a FileState or None, got {state!r}")
        by_directory.setdefault(parent(path), {})[basename(path)] = state
    return by_directory


class ListingReader(Protocol):
    """What ``changed_tree`` reads listings from (a ``ChecksumTree``, or any reader)."""

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]: ...


@dataclass
class ChangedTree:
    """A batch of changes computed over a tree, nothing written yet."""

    # Every affected directory (the changed paths' parents and all their ancestors) as the
    # changes leave it: None where it is empty (no such directory any more, or never was).
    listings: dict[str, DirectoryListing | None]
    # What a store must write and delete to get there: only what differs from what it had.
    writes: dict[str, DirectoryListing]
    deletes: list[str]
    summary: TreeSummary


def changed_tree(tree: ListingReader, changes: Mapping[str, FileState | None]) -> ChangedTree:
    """The listings ``changes`` (``path -> FileState`` added or overwritten, ``None`` removed)
    make of ``tree``'s, every affected directory's, computed in memory bottom-up."""
    by_directory = _group_changes(changes)
    affected = {""}
    for directory in by_directory:
        for ancestor in ancestors(directory):
            if ancestor in affected:
                break
            affected.add(ancestor)
    ordered = sorted(affected, key=lambda d: (-depth(d), d))
    stored = tree.read_many(ordered)

    # Compute everything in memory, deepest first, so that a conflict is found before any write.
    new: dict[str, DirectoryListing] = {}
    changed: set[str] = set()  # tracked per change: comparing whole listings costs O(size)
    for directory in ordered:
        original = stored.get(directory)
        listing = original.copy() if original is not None else DirectoryListing()
        files = listing.files
        for name, state in by_directory.get(directory, {}).items():
            old = files.get(name)
            if state is None:
                if old is not None:
                    del files[name]
                    changed.add(directory)
            elif old is None or old.digest != state.md5 or old.size != state.size:
                files[name] = _file_entry(name, state.md5, state.size)
                changed.add(directory)
        new[directory] = listing
    for directory in ordered:  # children come before their parents in this order
        listing = new[directory]
        both = listing.conflicts()
        if both:
            prefix = directory + "/" if directory else ""
            raise ChecksumFormatError(
                f"{[prefix + name for name in both]}: both a file and a directory after this batch"
            )
        if directory:
            # Set (never adjust) the parent's entry from this directory's fresh state.
            up_path = parent(directory)
            up = new[up_path]
            name = basename(directory)
            before = up.directories.get(name)
            if listing.is_empty():
                if before is not None:
                    del up.directories[name]
                    changed.add(up_path)
            else:
                digest, _, size = listing.summary()
                if before is None or before.digest != digest:
                    up.directories[name] = DirectoryEntry(name, digest, size)
                    changed.add(up_path)

    root = new[""]
    empty = root.is_empty()
    return ChangedTree(
        listings={d: None if new[d].is_empty() else new[d] for d in ordered},
        writes={d: new[d] for d in ordered if d in changed and not new[d].is_empty()},
        deletes=[d for d in ordered if new[d].is_empty() and stored.get(d) is not None],
        summary=TreeSummary(EMPTY_DIGEST, 0, 0) if empty else TreeSummary(*root.summary()),
    )


def apply_changes(tree: ChecksumTree, changes: Mapping[str, FileState | None]) -> TreeSummary:
    """Apply ``path -> FileState`` (added or overwritten) / ``None`` (removed); new root summary.
    Writes only the listings that changed, all levels in one call, so a store can write them
    with a single flush to disk. Order does not matter for correctness: a rerun after a crash
    rewrites the same listings."""
    computed = changed_tree(tree, changes)
    if computed.writes:
        tree.write_many(computed.writes)
    if computed.deletes:
        tree.delete_many(computed.deletes)
    return computed.summary
