"""A chunk of listing columns cut into runs: the entries of one directory, side by side.

``compute_tree_columns`` (``dandizarr.checksums.tree``) adds each run to its directory at once
instead of
an entry at a time; finding the runs is whole-column work in C (bisection, ``map``,
``itertools``), kept here apart from the tree walk that consumes them.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from operator import itemgetter, methodcaller, ne

from dandizarr.checksums.listing import ChecksumFormatError

_split_last_slash = methodcaller("rpartition", "/")
_first = itemgetter(0)
_last = itemgetter(2)
_starts_with_slash = methodcaller("startswith", "/")

# A run: entries start..end-1 of a chunk are the files ``names`` of ``directory``.
Run = tuple[int, int, str, Sequence[str]]


def _relative(directory: str, paths: Sequence[str]) -> None:
    if not directory:
        for path in itertools.compress(paths, map(_starts_with_slash, paths)):
            raise ChecksumFormatError(f"path must be relative: {path!r}")


def sorted_runs(paths: Sequence[str]) -> Iterator[Run]:
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


def any_order_runs(paths: Sequence[str]) -> Iterator[Run]:
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
