"""What changed between two trees of ``.checksum`` listings, read top-down: a directory whose
digest is the same on both sides is never opened, so a diff costs listing reads in proportion
to the directories that changed, not to the archive.

Changes come in the trees' own order (each directory's names sorted, a directory's files after
the entry that names it: the order of tuples of path components), which a cursor resumes: a
page of a diff is ``tree_changes(..., after=the page's last path)``. The walk keeps a stack of
directories to open, bounded by the trees' depth, never recursion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from dandizarr.checksums.listing import DirectoryListing

# Reads one directory's listing ("" is the root); None: no such directory.
ReadListing = Callable[[str], DirectoryListing | None]
Kind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    path: str
    kind: Kind
    # The file's size and md5 before (None: added) and after (None: deleted).
    size_before: int | None
    md5_before: str | None
    size_after: int | None
    md5_after: str | None

    # What a diff's bytes count (one rule, for the service's pages and the client's sums): the
    # new content's bytes (added and modified files) and the old content's (deleted and
    # modified files).
    @property
    def bytes_added(self) -> int:
        return self.size_after or 0

    @property
    def bytes_deleted(self) -> int:
        return self.size_before or 0


def _components(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")) if path else ()


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


_EMPTY = DirectoryListing()


@dataclass
class _Frame:
    """A directory being walked: its listings on both sides, its names, the next one's index."""

    directory: str
    prefix: tuple[str, ...]
    before: DirectoryListing
    after: DirectoryListing
    names: list[str]
    index: int = 0


def _frame(
    directory: str, read_before: ReadListing | None, read_after: ReadListing | None
) -> _Frame:
    before = (read_before(directory) if read_before else None) or _EMPTY
    after = (read_after(directory) if read_after else None) or _EMPTY
    names = sorted({*before.files, *before.directories, *after.files, *after.directories})
    return _Frame(directory, _components(directory), before, after, names)


def tree_changes(
    read_before: ReadListing, read_after: ReadListing, *, after: str = ""
) -> Iterator[Change]:
    """Each file added, modified or deleted from the tree ``read_before`` reads to the one
    ``read_after`` reads, in tree order, beginning past the path ``after`` (exclusive; "" from
    the start). A file on one side where the other has a directory is that file deleted (or
    added) and every file below the directory added (or deleted)."""
    cursor = _components(after)
    stack = [_frame("", read_before, read_after)]
    while stack:
        frame = stack[-1]
        if frame.index == len(frame.names):
            stack.pop()
            continue
        name = frame.names[frame.index]
        frame.index += 1
        here = (*frame.prefix, name)
        if cursor and here < cursor[: len(here)]:
            continue  # every path at or below it sorts before the cursor
        path = _join(frame.directory, name)
        old, new = frame.before.files.get(name), frame.after.files.get(name)
        if (old is not None or new is not None) and (not cursor or here > cursor):
            if old is None and new is not None:
                yield Change(path, "added", None, None, new.size, new.digest)
            elif new is None and old is not None:
                yield Change(path, "deleted", old.size, old.digest, None, None)
            elif old is not None and new is not None and old.digest != new.digest:
                yield Change(path, "modified", old.size, old.digest, new.size, new.digest)
        old_dir, new_dir = frame.before.directories.get(name), frame.after.directories.get(name)
        if old_dir is None and new_dir is None:
            continue
        if old_dir is not None and new_dir is not None and old_dir.digest == new_dir.digest:
            continue  # the same tree below: never opened
        # Its files come next, before the directory's next name: the tree order.
        stack.append(
            _frame(
                path,
                read_before if old_dir is not None else None,
                read_after if new_dir is not None else None,
            )
        )
