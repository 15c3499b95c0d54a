"""Object versions: what a store keeps of an object once it is overwritten or deleted.

Archive versions (the service's published versions of a Zarr archive) share objects with the
draft instead of copying them: the draft overwrites and deletes keys as it always did, and the
store keeps each replaced object as a *noncurrent version*. S3 (AWS, SeaweedFS, moto) does this
with bucket versioning; ``LocalObjectStore`` keeps hard links (nothing copied). A reader finds
the version it wants by its content: a loose file's md5 is its ETag.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    key: str
    version_id: str
    # The ETag without quotes ("" for a delete marker).
    etag: str
    size: int
    # The current object of its key (not a replaced one).
    latest: bool
    # A delete marker: the key was deleted then (no bytes).
    delete_marker: bool
    # When this version stopped being current (None while it is): the moment the next newer
    # version of its key, or the delete marker, was written.
    replaced_at: datetime | None
    # When it was written.
    modified: datetime

    def idle_since(self) -> datetime:
        """Since when nothing has needed it as its key's current object."""
        return self.replaced_at or self.modified


def with_replacement_times(
    newest_first: Iterable[tuple[str, str, str, int, bool, datetime]],
) -> Iterator[ObjectVersion]:
    """Versions of keys, each key's versions newest first, as ``(key, version_id, etag, size,
    delete_marker, last_modified)``: each with the time it was replaced (its successor's)."""
    successor: tuple[str, datetime] | None = None
    for key, version_id, etag, size, marker, modified in newest_first:
        replaced = successor[1] if successor is not None and successor[0] == key else None
        yield ObjectVersion(
            key, version_id, etag, size, replaced is None, marker, replaced, modified
        )
        successor = (key, modified)
