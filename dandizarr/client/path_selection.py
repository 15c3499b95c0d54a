"""Which files of an archive a partial download takes: ``--include`` and ``--exclude``
patterns over archive paths (docs/partial-work.md).

A pattern is a path from the archive's root whose components may hold glob wildcards: ``*``
any run of characters within one component, ``?`` one character, ``[...]`` a class (``[!...]``
its complement), and a whole component ``**`` any number of components (none too). A pattern
selects a file when it matches the file's path or the path of one of its directories, so
``0/0`` takes everything under ``0/0/`` and ``**/zarr.json`` every ``zarr.json``. A file is
taken when some include selects it (or there is no include) and no exclude does. These are
the semantics of the ``dandi`` client's ``--zarr glob:`` filters, plus the directory rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dandizarr.client.errors import ClientError

_WILDCARDS = re.compile(r"[*?\[]")


def _class_end(part: str, start: int) -> int:
    """Where the class opened at ``start`` closes (-1: it does not, the ``[`` is itself); a
    ``]`` first in the class (after any ``!``) is one of its characters, as in fnmatch."""
    first = start + 1
    if part[first : first + 1] == "!":
        first += 1
    return part.find("]", first + 1)


def _component_regex(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif (
            char == "["
            and (end := part.find("]", i + 2 if part[i + 1 : i + 2] in "!]" else i + 1)) > 0
        ):
            inner = part[i + 1 : end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression a pattern is: its own match, or that of a directory above."""
    parts = [p for p in pattern.strip("/").split("/") if p]
    if not parts:
        raise ClientError(f"empty pattern {pattern!r}: name a path of the archive")
    body = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            body += ".*" if last else "(?:[^/]+/)*"
        else:
            body += _component_regex(part) + ("" if last else "/")
    try:
        return re.compile(f"{body}(?:/.*)?", re.DOTALL)
    except re.error as error:  # a class such as [z-a]
        raise ClientError(f"bad pattern {pattern!r}: {error}") from None


@dataclass(frozen=True)
class PathSelection:
    includes: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    _include_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exclude_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include_res", tuple(map(pattern_regex, self.includes)))
        object.__setattr__(self, "_exclude_res", tuple(map(pattern_regex, self.excludes)))

    @property
    def partial(self) -> bool:
        return bool(self.includes or self.excludes)

    def selects(self, path: str) -> bool:
        if self._include_res and not any(r.fullmatch(path) for r in self._include_res):
            return False
        return not any(r.fullmatch(path) for r in self._exclude_res)

    def listing_root(self) -> str:
        """The deepest directory every include lies under, from their literal leading
        components (a pattern's last component may name a file, so it never counts): the
        listing starts there instead of at the root. '' without includes."""
        roots: list[list[str]] = []
        for pattern in self.includes:
            parts = [p for p in pattern.strip("/").split("/") if p][:-1]
            literal: list[str] = []
            for part in parts:
                if _WILDCARDS.search(part):
                    break
                literal.append(part)
            roots.append(literal)
        if not roots:
            return ""
        common = roots[0]
        for other in roots[1:]:
            n = 0
            while n < min(len(common), len(other)) and common[n] == other[n]:
                n += 1
            common = common[:n]
        return "/".join(common)
