"""Whole-tree hashing from a flat listing of (path, size, md5).

Streaming: every directory's entries form one contiguous run of a path-sorted listing
(all paths with prefix "d/" sort together), so a stack of the directories on the current
path is all the state needed; a directory is finished, hashed and reported the moment the
listing leaves its subtree. Files of one directory may be interleaved with its
subdirectories ("a/b", "a/b!/c", "a/c"), so each open directory keeps accumulating.

The per-file work is one ``rpartition`` and three list appends; everything else
(validation, sorting, JSON) runs over whole columns when a directory finishes.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from operator import itemgetter, lt

from checksums.listing import (
    _HEX_RUN,
    ChecksumFormatError,
    DirectoryEntry,
    DirectoryListing,
    check_md5,
    check_size,
    directories_json,
    file_entries,
    files_json,
    listing_json,
    make_digest,
    sorted_names_conflict,
)

OnDirectory = Callable[[str, DirectoryListing], None]
_DOT_NAMES = frozenset({".", ".."})


class UnsortedEntriesError(ChecksumFormatError):
    """A one-shot iterator returned to a directory it had already left."""


@dataclass(frozen=True)
class TreeSummary:
    digest: str
    count: int
    size: int


class _OpenDir:
    __slots__ = ("dir_names", "dirs", "md5s", "name", "names", "path", "prefix", "sizes")

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        # Paths below this directory start with prefix; "" for the root.
        self.prefix = path + "/" if path else ""
        self.names: list[str] = []
        self.md5s: list[str] = []
        self.sizes: list[int] = []
        self.dirs: list[tuple[str, str, int, int]] = []  # finished children
        self.dir_names: set[str] = set()  # children opened so far, finished or not


def _where(path: str) -> str:
    return f"directory {path!r}" if path else "the root directory"


def _bad_names(names: list[str], where: str) -> None:
    for name in names:
        if name in ("", ".", ".."):
            raise ChecksumFormatError(f"{where}: invalid file name {name!r} (path ends in '/'?)")


def _check_columns(names: list[str], md5s: list[str], sizes: list[int], where: str) -> None:
    try:
        lengths_ok = set(map(len, md5s)) == {32}
        hex_ok = lengths_ok and _HEX_RUN.fullmatch("".join(md5s)) is not None
    except TypeError:
        hex_ok = False
    if not hex_ok:
        for name, md5 in zip(names, md5s, strict=True):
            check_md5(md5, f"{where}, file {name!r}")
    if set(map(type, sizes)) != {int} or min(sizes) < 0:
        for name, size in zip(names, sizes, strict=True):
            check_size(size, f"{where}, file {name!r}")


def _finish(
    node: _OpenDir, parent: _OpenDir | None, on_directory: OnDirectory | None
) -> tuple[str, int, int]:
    """Hash a finished directory, add it to its parent, report it."""
    names, md5s, sizes = node.names, node.md5s, node.sizes
    where = _where(node.path)
    if names:
        _check_columns(names, md5s, sizes, where)
        ordered = sorted(names)
        if ordered != names:  # only for input that is grouped but not sorted
            order = sorted(range(len(names)), key=names.__getitem__)
            md5s = [md5s[i] for i in order]
            sizes = [sizes[i] for i in order]
            names = ordered
        if len(set(names)) != len(names):
            dupes = sorted({a for a, b in itertools.pairwise(names) if a == b})
            raise ChecksumFormatError(f"duplicate path(s) {[node.prefix + d for d in dupes]}")
        # Sorted: "" comes first and "." / ".." sit together where "." would be inserted.
        dot = bisect_left(names, ".")
        if names[0] == "" or not _DOT_NAMES.isdisjoint(names[dot : dot + 2]):
            _bad_names(names, where)
    dirs = node.dirs
    dirs.sort(key=itemgetter(0))
    clash = sorted_names_conflict(names, [entry[0] for entry in dirs]) if names else None
    if clash is not None:
        raise ChecksumFormatError(f"{node.prefix + clash!r} is both a file and a directory")
    count = len(names) + sum(entry[2] for entry in dirs)
    size = sum(sizes) + sum(entry[3] for entry in dirs)
    text = listing_json(directories_json(dirs), files_json(names, md5s, sizes))
    digest = make_digest(text, count, size)
    if parent is not None:
        parent.dirs.append((node.name, digest[:32], count, size))
    if on_directory is not None:
        listing = DirectoryListing(
            file_entries(names, md5s, sizes),
            {
                entry[0]: DirectoryEntry(entry[0], f"{entry[1]}-{entry[2]}--{entry[3]}", entry[3])
                for entry in dirs
            },
        )
        on_directory(node.path, listing)
    return digest, count, size


def _enter(stack: list[_OpenDir], directory: str, on_directory: OnDirectory | None) -> _OpenDir:
    """Make ``directory`` the top of the stack: finish what the listing has left, open the rest."""
    while len(stack) > 1:
        top = stack[-1]
        if directory == top.path or directory.startswith(top.prefix):
            break
        _finish(stack.pop(), stack[-1], on_directory)
    top = stack[-1]
    if directory == top.path:
        return top
    for name in directory[len(top.prefix) :].split("/"):
        if name in ("", ".", ".."):
            if directory.startswith("/"):
                raise ChecksumFormatError(f"paths must be relative (no leading '/'): {directory!r}")
            raise ChecksumFormatError(f"empty, '.' or '..' segment in directory {directory!r}")
        if name in top.dir_names:
            raise UnsortedEntriesError(
                f"entries under {top.prefix + name!r} are not contiguous: the input is not sorted"
                " by path; pass a list (it is then sorted) or sort the entries"
            )
        top.dir_names.add(name)
        top = _OpenDir(top.prefix + name, name)
        stack.append(top)
    return top


def _stream(
    entries: Iterable[tuple[str, int, str]], on_directory: OnDirectory | None
) -> TreeSummary:
    root = _OpenDir("", "")
    stack = [root]
    top = root
    # The current directory's path; None while it is the root, so that root files take the
    # slow branch below, which tells "a" (root file) from "/a" (invalid).
    current: str | None = None
    add_name, add_md5, add_size = top.names.append, top.md5s.append, top.sizes.append
    try:
        for path, size, md5 in entries:
            directory, slash, name = path.rpartition("/")
            if directory != current:
                if slash:
                    if not directory:
                        raise ChecksumFormatError(f"path must be relative: {path!r}")
                    top = _enter(stack, directory, on_directory)
                    current = directory
                    add_name, add_md5, add_size = (
                        top.names.append,
                        top.md5s.append,
                        top.sizes.append,
                    )
                elif top is not root:
                    while len(stack) > 1:
                        _finish(stack.pop(), stack[-1], on_directory)
                    top, current = root, None
                    add_name, add_md5, add_size = (
                        top.names.append,
                        top.md5s.append,
                        top.sizes.append,
                    )
            add_name(name)
            add_md5(md5)
            add_size(size)
    except ChecksumFormatError:
        raise
    except (TypeError, ValueError, AttributeError) as error:
        # Only errors raised in this frame (unpacking an entry, a non-str path) are about the
        # entry's shape; those from the iterator or the callback pass through untouched.
        if error.__traceback__ is not None and error.__traceback__.tb_next is not None:
            raise
        raise ChecksumFormatError(
            f"malformed entry (expected (path, size, md5)): {error}"
        ) from None
    while len(stack) > 1:
        _finish(stack.pop(), stack[-1], on_directory)
    digest, count, size = _finish(root, None, on_directory)
    return TreeSummary(digest, count, size)


def _path_of(entry: tuple[str, int, str]) -> str:
    return entry[0]


def compute_tree(
    entries: Iterable[tuple[str, int, str]], *, on_directory: OnDirectory | None = None
) -> TreeSummary:
    """The tree hash of an archive given as (path, size, md5) entries.

    Sorted input (code-point order, as S3 lists) streams in memory bounded by depth and fan-out.
    A collection (list, tuple, set...) in any order is sorted first. A one-shot iterator must
    keep each directory's entries contiguous (sorted, or sorted per path component);
    otherwise UnsortedEntriesError. ``on_directory(path, listing)`` is called once per
    directory, children before parents, "" being the root.
    """
    if isinstance(entries, Collection):
        try:
            paths = list(map(_path_of, entries))
            in_order = all(map(lt, paths, paths[1:]))
        except (TypeError, IndexError, KeyError) as error:
            raise ChecksumFormatError(
                f"malformed entry (expected (path, size, md5)): {error}"
            ) from None
        del paths
        if not in_order:
            entries = sorted(entries, key=_path_of)
    return _stream(entries, on_directory)
