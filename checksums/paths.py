"""Archive paths: relative, '/'-separated, no empty, '.' or '..' segments."""

from __future__ import annotations

from checksums.listing import ChecksumFormatError

_BAD_SEGMENTS = frozenset({"", ".", ".."})


def check_path(path: object) -> str:
    if type(path) is not str:
        raise ChecksumFormatError(f"path must be a string: {path!r}")
    if path.startswith("/"):
        raise ChecksumFormatError(f"path must be relative (no leading '/'): {path!r}")
    if not _BAD_SEGMENTS.isdisjoint(path.split("/")):
        raise ChecksumFormatError(f"path has an empty, '.' or '..' segment: {path!r}")
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
