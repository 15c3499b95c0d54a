"""HTTP ``Range`` headers (RFC 9110 section 14): the one parser of every view that serves bytes
(the local storage backend's object view and the archive's plain-HTTP reads)."""

from __future__ import annotations

import re

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Unsatisfiable(Exception):
    """A valid range that selects no byte of the representation: answer 416."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``[begin, stop)`` of a single-range ``Range`` header, or None to send the whole object
    (no header, a syntax we ignore as RFC 9110 allows, or several ranges)."""
    if not header:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first:
        if not last:
            return None
        suffix = int(last)
        if suffix == 0:
            raise Unsatisfiable
        if size == 0:
            return None  # a 206 cannot describe zero bytes; S3 answers 200 here too
        return max(0, size - suffix), size
    begin = int(first)
    if last and int(last) < begin:
        return None
    if begin >= size:
        raise Unsatisfiable
    stop = size if not last else min(int(last) + 1, size)
    return begin, stop
