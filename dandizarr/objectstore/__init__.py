"""Object storage: one small interface (``base.ObjectStore``) and its backends, S3 (``s3``,
signing with ``sigv4``) and a local directory (``local``; its files ``local_files``, its listing
``local_listing``, its presigned URLs ``signing``).

Pure library: no Django. The interface owns the storage contract (missing keys, ranges, ETags)
and each store its own request concurrency.
"""

from dandizarr.objectstore.base import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ListingOrderError,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
)

__all__ = [
    "DELETE_BATCH_SIZE",
    "InvalidRange",
    "ListingOrderError",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "PreconditionFailed",
]
