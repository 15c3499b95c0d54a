"""Whole-tree hashing from a flat listing of (path, size, md5): the two front ends.

``compute_tree`` takes the listing as entries, ``compute_tree_columns`` as chunks of columns
(``dandizarr checksum --listing``). Both walk it the same way, with the stack of open
directories of ``dandizarr.checksums.tree_directories``; the column front end cuts each chunk into
runs
with ``dandizarr.checksums.tree_runs``.

Streaming: every directory's entries form one contiguous run of a path-sorted listing
(all paths with prefix "d/" sort together), so a stack of the directories on the current
path is all the state needed; a directory is finished, hashed and reported the moment the
listing leaves its subtree. Files of one directory may be interleaved with its
subdirectories ("a/b", "a/b!/c", "a/c"), so each open directory keeps accumulating.

The per-file work is one ``rpartition`` and three list appends; everything else
(validation, sorting, JSON) runs over whole columns when a directory finishes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import lt

from dandizarr.checksums.listing import ChecksumFormatError, all_md5
from dandizarr.checksums.tree_directories import (
    OnDirectory,
    OpenDirectory,
    enter_directory,
    finish_directory,
)
from dandizarr.checksums.tree_runs import any_order_runs, sorted_runs

# A slice of a listing as three columns of equal length: paths, sizes, md5s. The sizes are
# ints or, from a parsed listing (``checked``), their canonical decimal text.
Columns = tuple[Sequence[str], Sequence[int | str], Sequence[str]]


@dataclass(frozen=True)
class TreeSummary:
    digest: str
    count: int
    size: int


def _stream(
    entries: Iterable[tuple[str, int, str]], on_directory: OnDirectory | None
) -> TreeSummary:
    root = OpenDirectory("", "")
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
                    top = enter_directory(stack, directory, on_directory)
                    current = directory
                    add_name, add_md5, add_size = (
                        top.names.append,
                        top.md5s.append,
                        top.sizes.append,
                    )
                elif top is not root:
                    while len(stack) > 1:
                        finish_directory(stack.pop(), stack[-1], on_directory)
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
        finish_directory(stack.pop(), stack[-1], on_directory)
    digest, count, size = finish_directory(root, None, on_directory)
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
    stack = [OpenDirectory("", "")]
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
            runs = list(sorted_runs(paths) if sorted_chunk else any_order_runs(paths))
        except (TypeError, AttributeError) as error:
            raise ChecksumFormatError(
                f"malformed entry (expected (path, size, md5)): {error}"
            ) from None
        for start, end, directory, names in runs:
            if directory:
                top = stack[-1]
                if directory != top.path:
                    top = enter_directory(
                        stack, directory, on_directory, checked=valid, in_order=in_order
                    )
            else:
                while len(stack) > 1:
                    finish_directory(
                        stack.pop(), stack[-1], on_directory, checked=valid, in_order=in_order
                    )
                top = stack[0]
            top.names += names
            top.sizes += sizes[start:end]
            top.md5s += md5s[start:end]
    while len(stack) > 1:
        finish_directory(stack.pop(), stack[-1], on_directory, checked=valid, in_order=in_order)
    digest, count, size = finish_directory(
        stack[0], None, on_directory, checked=valid, in_order=in_order
    )
    return TreeSummary(digest, count, size)


def _valid_columns(sizes: Sequence[int | str], md5s: Sequence[str]) -> bool:
    """Every size a non-negative int and every md5 32 lowercase hex digits."""
    try:
        return set(map(type, sizes)) == {int} and min(sizes) >= 0 and all_md5(md5s)  # type: ignore[operator]
    except TypeError:
        return False
