"""Archive paths: what a file path inside an archive may be, and how paths nest.

To the tree hash an archive path is a non-empty, relative, ``/``-separated string with no
empty, ``.`` or ``..`` segment: any name is hashable. Storage adds its own limits on top
(``dandizarr.objectstore.keys``), and the service its own (``zarr_api.domain.paths``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from dandizarr.checksums.listing import ChecksumFormatError

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


# --- Names every filesystem people download to can hold -------------------------------------
# A path the tree can hash may still not survive a download: Windows has device names (CON,
# nul.txt: any extension), drops a trailing dot or space; macOS and Windows fold case, macOS
# normalizes Unicode, so two names differing only by those become one file; and bidirectional
# text controls make a name display as another. New uploads are held to this rule (the service
# at batch start, the client before it uploads); what archives hold already stays readable.
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{n}" for n in "123456789"}
    | {f"LPT{n}" for n in "123456789"}
)
_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def portable_name_problem(name: str) -> str | None:
    """Why the name ``name`` (one segment) cannot be a file's on every filesystem, or None."""
    if name.split(".", 1)[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        return f"uses {name.split('.', 1)[0]!r}, a name Windows reserves for a device"
    if name.endswith((".", " ")):
        return "ends in a dot or a space, which Windows drops"
    if not _BIDI_CONTROLS.isdisjoint(name):
        return "contains a bidirectional text control, which makes it display as another name"
    return None


def portable_path_problem(path: str) -> str | None:
    """Why ``path`` (a valid tree path) has a name that is not portable, or None."""
    for segment in path.split("/"):
        if (problem := portable_name_problem(segment)) is not None:
            return f"has the name {segment!r} that {problem}"
    return None


def folded(name: str) -> str:
    """What ``name`` becomes where case and Unicode normalization do not tell names apart."""
    if name.isascii():  # the usual name: normalization changes nothing, casefold is lower
        return name.lower()
    return unicodedata.normalize("NFC", name).casefold()


def folded_clashes(paths: Iterable[str]) -> dict[str, str]:
    """Paths (files, or the directories above them) that differ from another of ``paths`` only
    by case or Unicode normalization: each mapped to the first one it clashes with."""
    seen: dict[tuple[str, str], str] = {}
    clashes: dict[str, str] = {}
    for path in sorted({*paths, *directories_above(paths)}):
        key = (parent(path), folded(basename(path)))
        first = seen.setdefault(key, path)
        if first != path:
            clashes[path] = first
    return clashes
