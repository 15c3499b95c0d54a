"""Objects put straight into the S3 model of this process' moto server (tests/conftest.py
``moto_server``), without a request: for a test whose subject is reading, listing or deleting
thousands of objects, or what the service makes of an upload, not writing them.

moto stores them as its PUT handler does (``S3Backend.put_object``: the same key, bytes, size and
md5 ETag); the code under test still reaches them over HTTP. About 20 times cheaper than the
PUTs: 2,000 of them cost moto's server and botocore about 6 CPU-s (docs/testing.md, make
test-fast's CPU). Writing many objects has tests of its own (``put_many``).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.s3.models import S3Backend, s3_backends

from dandizarr.objectstore import ObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore


def put_objects(store: ObjectStore, items: Mapping[str, bytes], moto_server: str) -> None:
    """``store.put_many(items)``; into moto's model directly when ``store`` is a bucket of the
    moto server at ``moto_server``."""
    if not (isinstance(store, S3ObjectStore) and store.endpoint_url == moto_server):
        store.put_many(items)
        return
    for key, body in items.items():
        _backend().put_object(store.bucket, key, body)


def put_to_upload_url(url: str, body: bytes) -> bool:
    """What a PUT of ``body`` to the presigned ``url`` stores, when the URL is of a bucket of
    this process' moto server (path-style, as the service signs for moto); False, with nothing
    written, for any other URL."""
    bucket, _, key = unquote(urlsplit(url).path).lstrip("/").partition("/")
    backend = _backend()
    if bucket not in backend.buckets:
        return False
    backend.put_object(bucket, key, body)
    return True


def _backend() -> S3Backend:
    # The server's account for any unknown access key, S3's partition of us-east-1.
    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
