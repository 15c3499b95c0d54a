"""The storage errors every backend raises (their one home; ``base`` re-exports them)."""

from __future__ import annotations


class ObjectStoreError(Exception):
    """Base class of storage errors."""


class StorageFull(ObjectStoreError):
    """Storage has no room left for the object (a full volume, a quota)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"storage is full: no room for {self.key}"


class ObjectNotFound(ObjectStoreError, KeyError):
    """The key does not exist."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"object not found: {self.key}"


class ListingOrderError(ObjectStoreError):
    """A listing that was to come in key order (UTF-8 byte order, S3's) did not."""

    def __init__(self, store: object, prefix: str, previous: str, key: str) -> None:
        super().__init__(store, prefix, previous, key)
        self.store = store
        self.prefix = prefix
        self.previous = previous
        self.key = key

    def __str__(self) -> str:
        return (
            f"{self.store!r} listed {self.prefix!r} out of key order: {self.key!r} came after "
            f"{self.previous!r} (S3 lists in UTF-8 byte order; this server does not)"
        )


class InvalidRange(ObjectStoreError, ValueError):
    """A byte range that the object cannot satisfy."""


class PreconditionFailed(ObjectStoreError):
    """The object's ETag is not the one the read was conditioned on (it changed)."""

    def __init__(self, key: str, expected_etag: str) -> None:
        super().__init__(key, expected_etag)
        self.key = key
        self.expected_etag = expected_etag

    def __str__(self) -> str:
        return f"object {self.key} no longer has ETag {self.expected_etag}"
