"""The object-storage interface every part of dandizarr uses.

Pure library: no Django. Two backends implement it: ``S3ObjectStore`` (boto3; AWS, MinIO,
moto) and ``LocalObjectStore`` (a directory tree, with presigned URLs served by the web app).
"""

from __future__ import annotations

import abc
import base64
import binascii
import builtins
import functools
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")
R = TypeVar("R")


# Runs a function over items, results in order: how a caller lends its thread pool.
Mapper = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


def _sequential_map(function: Callable[[T], R], items: list[T]) -> list[R]:
    return [function(item) for item in items]


def _thread_map(function: Callable[[T], R], items: list[T], *, max_workers: int) -> list[R]:
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        return list(pool.map(function, items))


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


_MD5_HEX = re.compile(r"[0-9a-f]{32}")


def strip_etag(etag: str) -> str:
    """The ETag without the quotes HTTP puts around it (and without a weak ``W/`` marker)."""
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"')


def check_md5_hex(md5_hex: str) -> str:
    """``md5_hex`` lower-cased; ValueError unless it is 32 hex digits."""
    normalized = md5_hex.strip().lower()
    if not _MD5_HEX.fullmatch(normalized):
        raise ValueError(f"not an md5 hex digest: {md5_hex!r}")
    return normalized


def content_md5_header(md5_hex: str) -> str:
    """The ``Content-MD5`` header value (base64 of the digest) for an md5 hex string."""
    return base64.b64encode(bytes.fromhex(check_md5_hex(md5_hex))).decode("ascii")


def md5_hex_from_content_md5(header: str) -> str:
    """The md5 hex of a ``Content-MD5`` header; ValueError when it is not base64 of 16 bytes."""
    try:
        digest = base64.b64decode(header.strip(), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"malformed Content-MD5: {header!r}") from error
    if len(digest) != 16:
        raise ValueError(f"malformed Content-MD5: {header!r}")
    return digest.hex()


def validate_range(start: int, end: int | None) -> None:
    """InvalidRange for arguments no object could satisfy (see ``ObjectStore.get_range``)."""
    if start < 0 and end is not None:
        raise InvalidRange(f"a suffix range takes no end: [{start}, {end})")
    if end is not None and end < start:
        raise InvalidRange(f"range ends before it starts: [{start}, {end})")


def range_header(start: int, end: int | None) -> str | None:
    """The HTTP ``Range`` header for ``[start, end)`` (None: the whole object, no header).

    ``end == start`` cannot be expressed in HTTP; callers handle the empty range themselves.
    """
    validate_range(start, end)
    if start < 0:
        return f"bytes={start}"
    if end is None:
        return None if start == 0 else f"bytes={start}-"
    if end == start:
        raise InvalidRange("an empty range has no HTTP form")
    return f"bytes={start}-{end - 1}"


class ObjectStore(abc.ABC):
    """Keys are ``/``-separated strings without a leading ``/``."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Store ``data`` at ``key`` atomically (readers see the old or the new object)."""

    def put_many(
        self,
        items: Mapping[str, bytes],
        *,
        mapper: Mapper | None = None,
    ) -> None:
        """Store many small objects: concurrently where requests are remote (``mapper``, default
        a thread pool), else as the backend does it best."""
        pairs = list(items.items())
        if mapper is None:
            mapper = (
                functools.partial(_thread_map, max_workers=32) if self.remote else _sequential_map
            )
        mapper(lambda pair: self.put(pair[0], pair[1]), pairs)

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; raises ObjectNotFound."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (``end=None``: to the end).

        A negative ``start`` with ``end=None`` is a suffix range: the last ``-start`` bytes
        (the whole object when it is shorter). An ``end`` past the object is clamped, and a
        ``start`` equal to the size gives ``b""`` (as slicing does; S3 itself answers 416).
        Raises ObjectNotFound, or InvalidRange when ``start`` is past the end of the object or
        the arguments are no range (``end < start``, or a negative ``start`` with an ``end``).
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

    # Whether each request is a network round trip (S3): then requests are issued concurrently
    # and a listing of a key range (1000 keys per request) beats a HEAD per key. On a local disk
    # a request is a few system calls, and threads would only add overhead.
    remote: ClassVar[bool] = False

    def head_many(
        self,
        keys: Sequence[str],
        *,
        max_workers: int = 32,
        mapper: Mapper | None = None,
    ) -> dict[str, ObjectInfo | None]:
        """``head`` of many keys, never one request after another.

        Where listing is cheap, keys that lie together in key order (an upload batch's usually
        do) are found by listing their key range: 500 keys cost one request instead of 500. A
        key the listing did not reach is asked for with a HEAD. ``mapper`` runs the HEADs
        concurrently (default: a thread pool of ``max_workers``).
        """
        wanted = sorted(set(keys))
        found: dict[str, ObjectInfo | None] = {}
        if self.remote and len(wanted) > 2:
            found = self._list_range(wanted)
        rest = [k for k in wanted if k not in found]
        if rest:
            if not self.remote:
                mapper = _sequential_map
            elif mapper is None:
                mapper = functools.partial(_thread_map, max_workers=max_workers)
            found.update(zip(rest, mapper(self.head, rest), strict=True))
        return {key: found[key] for key in keys}

    def _list_range(self, wanted: list[str]) -> dict[str, ObjectInfo | None]:
        """What a listing from the first to the last wanted key says of each wanted key.

        Every key up to the last one listed has been seen, so a wanted key among them that was
        not listed is absent. Stops when the listing strays (many foreign keys interleave) and
        leaves the keys it did not reach to the caller.
        """
        first, last = wanted[0], wanted[-1]
        prefix = posixpath.commonprefix([first, last]).rpartition("/")[0]
        prefix = prefix + "/" if prefix else ""
        # Just before ``first``: its last character decremented (harmless extra keys may follow).
        before = ord(first[-1]) - 1
        if 0xD800 <= before <= 0xDFFF:  # surrogates are not characters; step over them
            before = 0xD7FF
        start_after = first[:-1] + chr(before) if before >= 0 else None
        budget = 2 * len(wanted) + 1000
        wanted_set = set(wanted)
        listed: dict[str, ObjectInfo] = {}
        reached = ""
        # Pages no larger than needed: a server renders every key of a page.
        page_size = min(1000, len(wanted) + 16)
        listing = self.list(prefix, start_after=start_after, page_size=page_size)
        for count, info in enumerate(listing, start=1):
            reached = info.key
            if info.key in wanted_set:
                listed[info.key] = info
            if info.key >= last or count >= budget:
                break
        else:
            reached = "\U0010ffff"  # the listing ended: nothing after it exists
        return {key: listed.get(key) for key in wanted if key <= reached}

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

    def presigned_put_urls(
        self, items: Sequence[tuple[str, str]], *, expires_in: int
    ) -> builtins.list[str]:  # bare "list" is the method below
        """``presigned_put_url`` of many ``(key, md5_hex)`` pairs (a backend may sign them
        faster together)."""
        return [self.presigned_put_url(k, m, expires_in=expires_in) for k, m in items]

    @abc.abstractmethod
    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        """A URL that answers an HTTP GET (with Range support) of the object."""
