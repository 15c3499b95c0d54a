"""Archive paths: what a file path inside an archive may be, and how paths nest.

To the tree hash an archive path is a non-empty, relative, ``/``-separated string with no
empty, ``.`` or ``..`` segment: any name is hashable. Storage adds its own limits on top
(``objectstore.keys``), and the service its own (``zarr_api.paths``).
"""

from __future__ import annotations

from collections.abc import Iterable

from checksums.listing import ChecksumFormatError

_BAD_SEGMENTS = frozenset({"", ".", ".."})


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be a path in a tree, or None when it can."""
    if type(path) is not str:
        return "must be a string"
    if path == "":
        return "is empty"
    if path.startswith("/"):
        return "must not start with '/'"
    if not _BAD_SEGMENTS.isdisjoint(path.split("/")):
        return "must not contain empty, '.' or '..' segments"
    return None


def check_path(path: object) -> str:
    """``path`` if it is a valid archive path; ChecksumFormatError naming the problem if not."""
    problem = path_problem(path)
    if problem is not None:
        raise ChecksumFormatError(f"path {path!r} {problem}")
    assert isinstance(path, str)
    return path


def parent(path: str) -> str:
    """The directory holding ``path`` ("" = the root)."""
    return path.rpartition("/")[0]


def basename(path: str) -> str:
    return path.rpartition("/")[2]


def depth(directory: str) -> int:
    """0 for the root, 1 for "a", 2 for "a/b"."""
    return directory.count("/") + 1 if directory else 0


def ancestors(directory: str) -> list[str]:
    """``directory`` and every directory above it, deepest first, ending with the root ""."""
    result = [directory]
    while directory:
        directory = parent(directory)
        result.append(directory)
    return result


def directories_above(paths: Iterable[str]) -> set[str]:
    """Every directory above any of ``paths``, the root left out: {"a", "a/b"} for "a/b/c".
    A directory's chain upwards is walked once, however many of the paths it holds."""
    found: set[str] = set()
    for path in paths:
        directory = parent(path)
        while directory and directory not in found:
            found.add(directory)
            directory = parent(directory)
    return found
