"""The object-storage interface every part of dandizarr uses.

Pure library: no Django. Two backends implement it: ``S3ObjectStore`` (boto3; AWS, MinIO,
moto) and ``LocalObjectStore`` (a directory tree, with presigned URLs served by the web app).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

# S3's DeleteObjects accepts at most this many keys per request.
DELETE_BATCH_SIZE = 1000


class ObjectStoreError(Exception):
    """Base class of storage errors."""


class ObjectNotFound(ObjectStoreError, KeyError):
    """The key does not exist."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"object not found: {self.key}"


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


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    # The ETag without quotes. For single-part uploads without SSE-KMS/SSE-C this is the md5 hex
    # of the body; a multipart ETag looks like ``<hex>-<parts>`` and is not a content md5.
    etag: str


class ObjectStore(abc.ABC):
    """Keys are ``/``-separated strings without a leading ``/``."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Store ``data`` at ``key`` atomically (readers see the old or the new object)."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; raises ObjectNotFound."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (``end=None``: to the end).

        A negative ``start`` with ``end=None`` is a suffix range: the last ``-start`` bytes.
        Raises ObjectNotFound, or InvalidRange when ``start`` is past the end of the object.
        """

    @abc.abstractmethod
    def read_range(
        self, key: str, start: int, end: int | None = None, *, if_match: str | None = None
    ) -> tuple[bytes, str]:
        """Like ``get_range`` but also returns the object's ETag, in one request.

        With ``if_match``, raises PreconditionFailed when the object's ETag differs, so a
        cached index of the object can be used and validated by the same request.
        """

    @abc.abstractmethod
    def iter_chunks(self, key: str, chunk_size: int = 8 << 20) -> Iterator[bytes]:
        """Stream the object in pieces of at most ``chunk_size`` bytes; raises ObjectNotFound."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and ETag of the object, or None when it does not exist."""

    def head_many(
        self, keys: Sequence[str], *, max_workers: int = 32
    ) -> dict[str, ObjectInfo | None]:
        """``head`` of many keys, issued concurrently (never one after another)."""
        from concurrent.futures import ThreadPoolExecutor

        if not keys:
            return {}
        with ThreadPoolExecutor(max_workers=min(max_workers, len(keys))) as pool:
            return dict(zip(keys, pool.map(self.head, keys), strict=True))

    @abc.abstractmethod
    def list(
        self, prefix: str = "", *, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order (UTF-8 byte order),
        starting after ``start_after``; fetched ``page_size`` at a time."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the keys (absent keys are fine), in requests of at most 1000 keys."""

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    @abc.abstractmethod
    def presigned_put_url(self, key: str, md5_hex: str, *, expires_in: int) -> str:
        """A URL that accepts one HTTP PUT of a body whose md5 is ``md5_hex``.

        The md5 is bound into the signature: the client must send it as the ``Content-MD5``
        header (base64 of the digest), and a body with another md5 is rejected (BadDigest).
        """

    @abc.abstractmethod
    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        """A URL that answers an HTTP GET (with Range support) of the object."""
