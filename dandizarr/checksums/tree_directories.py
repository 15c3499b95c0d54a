"""The open directories of a whole-tree hash: entering them, finishing them, hashing them.

A tree is hashed from a path-sorted (or per-directory contiguous) listing with a stack of the
directories on the current path (see ``dandizarr.checksums.tree``). What happens to that stack does
not
depend on how the listing arrives, so both front ends, ``compute_tree`` (entries) and
``compute_tree_columns`` (chunks of columns), share it from here: ``enter_directory`` finishes
the directories the listing has left and opens the new ones; ``finish_directory`` validates a
directory's columns (a whole column at a time), sorts them, hashes the directory, adds it to
its parent and reports it.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Sequence
from operator import itemgetter

from dandizarr.checksums.listing import (
    ChecksumFormatError,
    DirectoryEntry,
    DirectoryListing,
    all_md5,
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


class OpenDirectory:
    """A directory the listing has entered and not yet left: its files so far, its finished
    subdirectories."""

    __slots__ = ("dir_names", "dirs", "md5s", "name", "names", "path", "prefix", "sizes")

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        # Paths below this directory start with prefix; "" for the root.
        self.prefix = path + "/" if path else ""
        self.names: list[str] = []
        self.md5s: list[str] = []
        self.sizes: list[int | str] = []  # ints, or a parsed listing's decimal texts
        self.dirs: list[tuple[str, str, int, int]] = []  # finished children
        self.dir_names: set[str] = set()  # children opened so far, finished or not


def _where(path: str) -> str:
    return f"directory {path!r}" if path else "the root directory"


def _bad_names(names: list[str], where: str) -> None:
    for name in names:
        if name in ("", ".", ".."):
            raise ChecksumFormatError(f"{where}: invalid file name {name!r} (path ends in '/'?)")


def _check_columns(names: list[str], md5s: list[str], sizes: list[int | str], where: str) -> None:
    try:
        hex_ok = all_md5(md5s)
    except TypeError:
        hex_ok = False
    if not hex_ok:
        for name, md5 in zip(names, md5s, strict=True):
            check_md5(md5, f"{where}, file {name!r}")
    if set(map(type, sizes)) != {int} or min(sizes) < 0:  # type: ignore[operator]  # ints by then
        for name, size in zip(names, sizes, strict=True):
            check_size(size, f"{where}, file {name!r}")


def finish_directory(
    node: OpenDirectory,
    parent: OpenDirectory | None,
    on_directory: OnDirectory | None,
    *,
    checked: bool = False,
    in_order: bool = False,
) -> tuple[str, int, int]:
    """Hash a finished directory, add it to its parent, report it. ``checked``: its md5 and
    size columns were validated already (a chunk at a time); ``in_order``: its names came
    from a strictly increasing stream of paths, so they are sorted and unique already."""
    names, md5s, sizes = node.names, node.md5s, node.sizes
    if names:
        if not checked:
            _check_columns(names, md5s, sizes, _where(node.path))
        if not in_order:
            names, md5s, sizes = _sorted_unique(node, names, md5s, sizes)
        # Sorted: "" comes first and "." / ".." sit together where "." would be inserted.
        dot = bisect_left(names, ".")
        if names[0] == "" or not _DOT_NAMES.isdisjoint(names[dot : dot + 2]):
            _bad_names(names, _where(node.path))
    dirs = node.dirs
    if dirs:
        dirs.sort(key=itemgetter(0))
        clash = sorted_names_conflict(names, [entry[0] for entry in dirs]) if names else None
        if clash is not None:
            raise ChecksumFormatError(f"{node.prefix + clash!r} is both a file and a directory")
        count = len(names) + sum(entry[2] for entry in dirs)
        size = _total(sizes) + sum(entry[3] for entry in dirs)
    else:  # a leaf: most directories of an archive
        count = len(names)
        size = _total(sizes)
    text = listing_json(directories_json(dirs), files_json(names, md5s, sizes))
    digest = make_digest(text, count, size)
    if parent is not None:
        parent.dirs.append((node.name, digest[:32], count, size))
    if on_directory is not None:
        listing = DirectoryListing(
            file_entries(names, md5s, list(map(int, sizes))),
            {
                entry[0]: DirectoryEntry(entry[0], f"{entry[1]}-{entry[2]}--{entry[3]}", entry[3])
                for entry in dirs
            },
        )
        on_directory(node.path, listing)
    return digest, count, size


def _total(sizes: Sequence[int | str]) -> int:
    """The sum of sizes given as ints or, from a parsed listing, as their decimal text."""
    try:
        return sum(sizes)  # type: ignore[arg-type]
    except TypeError:
        return sum(map(int, sizes))


def _sorted_unique(
    node: OpenDirectory, names: list[str], md5s: list[str], sizes: list[int | str]
) -> tuple[list[str], list[str], list[int | str]]:
    """The columns in name order; ChecksumFormatError for a name given twice."""
    ordered = sorted(names)
    if ordered != names:  # only for input that is grouped but not sorted
        order = sorted(range(len(names)), key=names.__getitem__)
        md5s = [md5s[i] for i in order]
        sizes = [sizes[i] for i in order]
        names = ordered
    if len(set(names)) != len(names):
        dupes = sorted({a for a, b in itertools.pairwise(names) if a == b})
        raise ChecksumFormatError(f"duplicate path(s) {[node.prefix + d for d in dupes]}")
    return names, md5s, sizes


def enter_directory(
    stack: list[OpenDirectory],
    directory: str,
    on_directory: OnDirectory | None,
    *,
    checked: bool = False,
    in_order: bool = False,
) -> OpenDirectory:
    """Make ``directory`` the top of the stack: finish what the listing has left, open the rest."""
    while len(stack) > 1:
        top = stack[-1]
        if directory == top.path or directory.startswith(top.prefix):
            break
        finish_directory(stack.pop(), stack[-1], on_directory, checked=checked, in_order=in_order)
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
        top = OpenDirectory(top.prefix + name, name)
        stack.append(top)
    return top
