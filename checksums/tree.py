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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter, lt, methodcaller, ne

from checksums.listing import (
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
# A slice of a listing as three columns of equal length: paths, sizes, md5s. The sizes are
# ints or, from a parsed listing (``checked``), their canonical decimal text.
Columns = tuple[Sequence[str], Sequence[int | str], Sequence[str]]
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


def _finish(
    node: _OpenDir,
    parent: _OpenDir | None,
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
    node: _OpenDir, names: list[str], md5s: list[str], sizes: list[int | str]
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


def _enter(
    stack: list[_OpenDir],
    directory: str,
    on_directory: OnDirectory | None,
    *,
    checked: bool = False,
    in_order: bool = False,
) -> _OpenDir:
    """Make ``directory`` the top of the stack: finish what the listing has left, open the rest."""
    while len(stack) > 1:
        top = stack[-1]
        if directory == top.path or directory.startswith(top.prefix):
            break
        _finish(stack.pop(), stack[-1], on_directory, checked=checked, in_order=in_order)
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


_split_last_slash = methodcaller("rpartition", "/")
_first = itemgetter(0)
_last = itemgetter(2)
_starts_with_slash = methodcaller("startswith", "/")


def compute_tree_columns(
    chunks: Iterable[Columns],
    *,
    on_directory: OnDirectory | None = None,
    checked: bool = False,
) -> TreeSummary:
    """``compute_tree`` of a listing given as consecutive chunks of columns, for a listing
    too large for one tuple per entry (``dandizarr checksum --listing``).

    The same tree, checks and errors as ``compute_tree`` of a one-shot iterator of the entries
    (UnsortedEntriesError when a directory's entries are not contiguous), but the per-entry
    work is whole-column passes in C: each run of entries in one directory is added at once.
    ``checked``: the caller has validated every md5 (32 lowercase hex) and size (an int >= 0,
    or its decimal text without leading zeros), as ``parse_listing_columns`` does; they are
    then not checked again. Sizes as text are accepted only so.
    """
    stack = [_OpenDir("", "")]
    # valid: every chunk's md5s and sizes passed a whole-chunk check so far, so directories skip
    # their own; from the first chunk that fails, each directory finished is checked (and names
    # the bad entry as the stream would). in_order: every path so far is greater than the one
    # before it, so every directory's names arrive sorted and unique (no sort, no set).
    valid = in_order = True
    last = ""
    for paths, sizes, md5s in chunks:
        n = len(paths)
        if len(sizes) != n or len(md5s) != n:
            raise ChecksumFormatError("malformed columns: paths, sizes and md5s differ in length")
        if n == 0:
            continue
        valid = valid and (checked or _valid_columns(sizes, md5s))
        try:
            sorted_chunk = all(map(lt, paths, paths[1:]))
            in_order = in_order and sorted_chunk and last < paths[0]
            last = paths[-1]
            runs = list(_sorted_runs(paths) if sorted_chunk else _runs(paths))
        except (TypeError, AttributeError) as error:
            raise ChecksumFormatError(
                f"malformed entry (expected (path, size, md5)): {error}"
            ) from None
        for start, end, directory, names in runs:
            if directory:
                top = stack[-1]
                if directory != top.path:
                    top = _enter(stack, directory, on_directory, checked=valid, in_order=in_order)
            else:
                while len(stack) > 1:
                    _finish(stack.pop(), stack[-1], on_directory, checked=valid, in_order=in_order)
                top = stack[0]
            top.names += names
            top.sizes += sizes[start:end]
            top.md5s += md5s[start:end]
    while len(stack) > 1:
        _finish(stack.pop(), stack[-1], on_directory, checked=valid, in_order=in_order)
    digest, count, size = _finish(stack[0], None, on_directory, checked=valid, in_order=in_order)
    return TreeSummary(digest, count, size)


def _valid_columns(sizes: Sequence[int | str], md5s: Sequence[str]) -> bool:
    """Every size a non-negative int and every md5 32 lowercase hex digits."""
    try:
        return set(map(type, sizes)) == {int} and min(sizes) >= 0 and all_md5(md5s)  # type: ignore[operator]
    except TypeError:
        return False


# A run: entries start..end-1 of a chunk are the files ``names`` of ``directory``.
Run = tuple[int, int, str, Sequence[str]]


def _relative(directory: str, paths: Sequence[str]) -> None:
    if not directory:
        for path in itertools.compress(paths, map(_starts_with_slash, paths)):
            raise ChecksumFormatError(f"path must be relative: {path!r}")


def _sorted_runs(paths: Sequence[str]) -> Iterator[Run]:
    """The runs of strictly increasing paths. A run is found by bisection: every path from
    its first one's directory + "/" up to directory + "0" ("0" follows "/") is below that
    directory, and when none of them has another "/" (a leaf directory: most of an archive)
    they are its run. Otherwise a run is also cut where the number of slashes changes,
    counted once per chunk, from the first run that needs it."""
    n = len(paths)
    changes: list[int] | None = None  # where the number of slashes changes, and n
    start = 0
    while start < n:
        directory = paths[start].rpartition("/")[0]
        end = bisect_left(paths, directory + "0", start, n) if directory else n
        if changes is not None:
            end = min(end, changes[bisect_right(changes, start)])
        names = paths[start:end]
        if directory:
            names = list(map(itemgetter(slice(len(directory) + 1, None)), names))
        if changes is None and "/" in "".join(names):
            changes = _slash_changes(paths)
            end = min(end, changes[bisect_right(changes, start)])
            names = names[: end - start]
        if not directory:
            _relative(directory, names)
        yield start, end, directory, names
        start = end


def _slash_changes(paths: Sequence[str]) -> list[int]:
    """The indexes where the number of slashes differs from the previous path's, and n."""
    n = len(paths)
    slashes = list(map(str.count, paths, itertools.repeat("/")))
    return [*itertools.compress(range(1, n), map(ne, slashes[1:], slashes)), n]


def _runs(paths: Sequence[str]) -> Iterator[Run]:
    """The runs of paths in any order: each path split once."""
    n = len(paths)
    parts = list(map(_split_last_slash, paths))
    directories = list(map(_first, parts))
    names = list(map(_last, parts))
    del parts
    starts = [0, *itertools.compress(range(1, n), map(ne, directories[1:], directories))]
    for start, end in zip(starts, [*starts[1:], n], strict=True):
        directory = directories[start]
        _relative(directory, paths[start:end])
        yield start, end, directory, names[start:end]
