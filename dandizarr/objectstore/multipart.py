"""Multipart uploads: S3's limits, the part size rule and the composite ETag.

Pure library, the one home of these numbers and rules: the service picks a big file's parts
with ``part_size`` and checks the object storage made with ``composite_etag``; the client cuts
its file with the same ``part_ranges`` (it learns ``minimum`` from the service's
``/api/info/``). S3's rules: https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from dandizarr.objectstore.digests import check_md5_hex

MIB = 1 << 20
GiB = 1 << 30
# S3 refuses a single PUT of more than this.
MAX_SINGLE_PUT = 5 * GiB
# S3's largest object.
MAX_OBJECT = 5 * (1 << 40)
# Every part but the last is at least this big (S3 answers EntityTooSmall on completion).
MIN_PART = 5 * MIB
# And at most this big.
MAX_PART = 5 * GiB
# Part numbers are 1..MAX_PARTS.
MAX_PARTS = 10_000


def part_size(size: int, minimum: int = MIN_PART) -> int:
    """The part size of a ``size``-byte object: ``minimum`` (at least S3's 5 MiB), or the
    smallest whole MiB that keeps the parts within S3's 10,000 (a 5 TiB object: 525 MiB)."""
    if size < 0 or size > MAX_OBJECT:
        raise ValueError(f"an object of {size} bytes is not one S3 can hold (0..{MAX_OBJECT})")
    minimum = max(minimum, MIN_PART)
    needed = -(-size // MAX_PARTS)  # ceil
    needed = -(-needed // MIB) * MIB  # whole MiB
    return min(max(minimum, needed), MAX_PART)


def part_ranges(size: int, part_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each part of a ``size``-byte object cut every ``part_bytes``."""
    if part_bytes <= 0:
        raise ValueError(f"part size must be positive, got {part_bytes}")
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + part_bytes, size)) for start in range(0, size, part_bytes)]


def part_count(size: int, part_bytes: int) -> int:
    return max(1, -(-size // part_bytes))


def composite_etag(part_md5s: Sequence[str]) -> str:
    """The ETag S3 gives the object a multipart upload of these parts completes into: the md5
    of the concatenated part digests, then ``-`` and the number of parts. It proves which
    parts the object is made of, not the md5 of its bytes."""
    joined = b"".join(bytes.fromhex(check_md5_hex(m)) for m in part_md5s)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(part_md5s)}"


def is_composite_etag(etag: str) -> bool:
    head, dash, count = etag.partition("-")
    return bool(dash) and count.isdigit() and len(head) == 32


@dataclass(frozen=True, slots=True)
class UploadedPart:
    """A part storage holds of an unfinished multipart upload."""

    number: int
    etag: str  # the part's md5 hex (S3 without SSE-KMS/SSE-C)
    size: int


@dataclass(frozen=True, slots=True)
class UnfinishedUpload:
    """A multipart upload storage still holds (and bills for) until completed or aborted."""

    key: str
    upload_id: str
    initiated: datetime
