"""Object storage: one small interface, an S3 and a local-filesystem backend."""

from objectstore.base import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
)

__all__ = [
    "DELETE_BATCH_SIZE",
    "InvalidRange",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "PreconditionFailed",
]
