"""The object-storage interface every part of dandizarr uses.

Pure library: no Django. Two backends implement it: ``S3ObjectStore`` (boto3; AWS, MinIO,
moto) and ``LocalObjectStore`` (a directory tree, with presigned URLs served by the web app).
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from dandizarr.objectstore.errors import (
    InvalidRange,
    ListingOrderError,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
    StorageFull,
)
from dandizarr.objectstore.versions import ObjectVersion

if TYPE_CHECKING:
    from dandizarr.objectstore.multipart import UnfinishedUpload, UploadedPart

__all__ = [
    "DELETE_BATCH_SIZE",
    "InvalidRange",
    "ListingOrderError",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "PreconditionFailed",
    "StorageFull",
]

T = TypeVar("T")
R = TypeVar("R")

# Guards the lazy creation of each store's request pool.
_pool_creation_lock = threading.Lock()

# S3's DeleteObjects accepts at most this many keys per request.
DELETE_BATCH_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    # The ETag without quotes. For single-part uploads without SSE-KMS/SSE-C this is the md5 hex
    # of the body; a multipart ETag looks like ``<hex>-<parts>`` and is not a content md5.
    etag: str


def validate_range(start: int, end: int | None) -> None:
    """InvalidRange for arguments no object could satisfy (see ``ObjectStore.get_range``)."""
    if start < 0 and end is not None:
        raise InvalidRange(f"a suffix range takes no end: [{start}, {end})")
    if end is not None and end < start:
        raise InvalidRange(f"range ends before it starts: [{start}, {end})")


def resolve_range(key: str, size: int, start: int, end: int | None) -> tuple[int, int]:
    """``[begin, stop)`` offsets of the range in an object of ``size`` bytes (see
    ``ObjectStore.get_range``); InvalidRange when ``start`` is past the end."""
    validate_range(start, end)
    if start < 0:
        return max(0, size + start), size
    if start > size:
        raise InvalidRange(f"{key}: start {start} is past the end ({size} bytes)")
    return start, size if end is None else min(end, size)


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


# Wanted keys per listing in ``head_many`` (the ranges are listed concurrently).
LISTED_PER_RANGE = 1000


class ObjectStore(abc.ABC):
    """Keys are ``/``-separated strings without a leading ``/``.

    A missing key: every method that returns an object's bytes (``get``, ``get_range``,
    ``read_range``, ``iter_chunks``) raises ``ObjectNotFound`` (a ``KeyError``); the probes
    answer instead of raising (``head`` None, ``head_many`` None for that key, ``exists``
    False); deleting a missing key succeeds.

    The store owns its concurrency: the batch methods (``put_many``, ``head_many``) run their
    requests on the store's own pool of ``concurrency`` threads when requests are remote.
    """

    # Whether each request is a network round trip (S3): then requests are issued concurrently
    # and a listing of a key range (1000 keys per request) beats a HEAD per key. On a local disk
    # a request is a few system calls, and threads would only add overhead.
    remote: ClassVar[bool] = False
    # Whether the store takes multipart uploads (S3; files past 5 GiB need them).
    takes_multipart: ClassVar[bool] = False
    # Requests a batch method runs at once (remote stores; a backend's constructor sets it).
    concurrency: int = 32
    _request_pool: ThreadPoolExecutor | None = None

    def map_requests(self, function: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[function(item) for item in items]``, concurrently on the store's pool when
        requests are remote. One pool per store, so batches reuse threads: the service's
        concurrent storage work (HEADs, .checksum reads, conversions) all runs here, sized by
        the store's ``concurrency``. ``function`` must not call this again (a pool thread
        waiting for the pool could wait for ever)."""
        if not self.remote or len(items) <= 1 or self.concurrency <= 1:
            return [function(item) for item in items]
        pool = self._request_pool
        if pool is None:
            with _pool_creation_lock:
                if self._request_pool is None:
                    self._request_pool = ThreadPoolExecutor(
                        max_workers=self.concurrency, thread_name_prefix="objectstore"
                    )
                pool = self._request_pool
        return list(pool.map(function, items))

    def warm_up(self) -> None:
        """Start what the first requests would otherwise wait for: a remote store's pool
        threads (a server's first tree update started 21 of them, 6 ms each, while the
        client waited for its checksum). For a service, before it serves."""
        if not self.remote or self.concurrency <= 1:
            return
        started = threading.Barrier(self.concurrency, timeout=10)

        def meet(_: int) -> None:
            # Each task waits for all the others, so the pool starts a thread for every one.
            # Best effort: a pool already busy elsewhere only starts fewer.
            with contextlib.suppress(threading.BrokenBarrierError):
                started.wait()

        self.map_requests(meet, range(self.concurrency))

    @abc.abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Store ``data`` at ``key`` atomically (readers see the old or the new object)."""

    def put_many(self, items: Mapping[str, bytes]) -> None:
        """Store many small objects: concurrently where requests are remote, else as the
        backend does it best."""
        self.map_requests(lambda pair: self.put(pair[0], pair[1]), list(items.items()))

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; raises ObjectNotFound."""

    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (``end=None``: to the end).

        A negative ``start`` with ``end=None`` is a suffix range: the last ``-start`` bytes
        (the whole object when it is shorter). An ``end`` past the object is clamped, and a
        ``start`` equal to the size gives ``b""`` (as slicing does; S3 itself answers 416).
        Raises ObjectNotFound, or InvalidRange when ``start`` is past the end of the object or
        the arguments are no range (``end < start``, or a negative ``start`` with an ``end``).
        """
        return self.read_range(key, start, end)[0]

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

    def head_many(self, keys: Sequence[str]) -> dict[str, ObjectInfo | None]:
        """``head`` of many keys, never one request after another.

        Where listing is cheap, keys that lie together in key order (an upload batch's usually
        do) are found by listing their key range: 500 present keys cost one request instead of
        500. A key the listing did not show is asked for with a HEAD, concurrently on the
        store's pool: a listing proves presence, never absence (see ``list``).
        """
        wanted = sorted(set(keys))
        found: dict[str, ObjectInfo | None] = {}
        if self.remote and len(wanted) > 2:
            # A listing page at a time is a round trip after another: ranges of a page's worth
            # of wanted keys are listed at once (10,000 keys in the time of a few pages).
            ranges = [
                wanted[at : at + LISTED_PER_RANGE] for at in range(0, len(wanted), LISTED_PER_RANGE)
            ]
            for listed in self.map_requests(self._list_range, ranges):
                found.update(listed)
        rest = [k for k in wanted if k not in found]
        if rest:
            found.update(zip(rest, self.map_requests(self.head, rest), strict=True))
        return {key: found[key] for key in keys}

    def _list_range(self, wanted: builtins.list[str]) -> dict[str, ObjectInfo]:
        """The wanted keys that a listing from the first to the last wanted key shows.

        Only presence is taken from the listing: a server that lists in another order than
        S3's, or reads ``start_after`` its own way, may not show a key that exists, so a key
        not shown is left to the caller. Stops at the last wanted key, or when the listing
        strays (many foreign keys interleave).
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
        # Pages no larger than needed: a server renders every key of a page.
        page_size = min(1000, len(wanted) + 16)
        listing = self.list(prefix, start_after=start_after, page_size=page_size)
        for count, info in enumerate(listing, start=1):
            if info.key in wanted_set:
                listed[info.key] = info
                if len(listed) == len(wanted_set):
                    break
            if info.key >= last or count >= budget:
                break
        return listed

    @abc.abstractmethod
    def list(
        self, prefix: str = "", *, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, each once, fetched ``page_size`` at
        a time, in the order the backend lists.

        The listing-order contract: S3 (and the local backend) list in key order (UTF-8 byte
        order), and ``start_after`` skips every key up to it in that order. Not every
        S3-compatible server does: SeaweedFS lists directory by directory ("p/a/b" before
        "p/a-b") and reads ``start_after`` as a position in that walk. So no caller may infer
        from a listing that a key it did not show is absent, and a caller that needs byte
        order asks ``list_ordered`` (streams, or raises ListingOrderError) or ``list_sorted``
        (always; sorts in memory).
        """

    def list_ordered(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """``list(prefix)`` checked to be in byte order as it streams: ListingOrderError at
        the first key out of order, before that key is yielded."""
        previous: str | None = None
        for info in self.list(prefix):
            if previous is not None and info.key <= previous:
                raise ListingOrderError(self, prefix, previous, info.key)
            previous = info.key
            yield info

    def list_sorted(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Every object under ``prefix`` in byte order whatever order the server lists in,
        held in memory (Python orders str by code point, which is UTF-8 byte order)."""
        by_key = {info.key: info for info in self.list(prefix)}
        return [by_key[key] for key in sorted(by_key)]

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

    def presigned_put_urls_with_acl(
        self, keys: Sequence[str], acl: str, *, expires_in: int
    ) -> builtins.list[str]:
        """PUT URLs that require the header ``X-Amz-ACL: {acl}`` and no Content-MD5, for
        clients that send that header and no md5. Storage checks no digest on these: whoever
        hands them out must verify what was stored."""
        raise NotImplementedError(f"{type(self).__name__} signs no ACL upload URLs")

    # --- versions (dandizarr.objectstore.versions) ----------------------------------------------

    @abc.abstractmethod
    def enable_versioning(self) -> None:
        """Keep every overwritten or deleted object as a noncurrent version from now on."""

    @abc.abstractmethod
    def versioning_enabled(self) -> bool: ...

    @abc.abstractmethod
    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        """Every version below ``prefix``: keys in order, each key's versions newest first."""

    @abc.abstractmethod
    def get_version_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of one version of ``key`` (ObjectNotFound when it is gone)."""

    @abc.abstractmethod
    def delete_versions(self, versions: Iterable[tuple[str, str]]) -> None:
        """Delete ``(key, version_id)`` pairs for good (absent ones are fine)."""

    @abc.abstractmethod
    def restore_version(self, key: str, version_id: str) -> None:
        """Make version ``version_id`` of ``key`` its current object again, without moving its
        bytes where the store can (S3: removing the delete markers above it; locally: a hard
        link); else by a copy inside storage (S3: CopyObject)."""

    def find_version(self, key: str, etag: str | None) -> ObjectVersion | None:
        """The newest version of ``key`` whose ETag is ``etag`` (any, when None) that is not a
        delete marker: how a reader finds replaced bytes by their md5."""
        for version in self.list_versions(key):
            if version.key > key:
                return None  # past the key: the listing is in key order
            wanted = etag is None or version.etag == etag
            if version.key == key and not version.delete_marker and wanted:
                return version
        return None

    @abc.abstractmethod
    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        """A URL that answers an HTTP GET (with Range support) of the object."""

    def presigned_get_urls(
        self, keys: Sequence[str], *, expires_in: int
    ) -> builtins.list[str]:  # bare "list" is the method above
        """``presigned_get_url`` of many keys (a backend may sign them faster together)."""
        return [self.presigned_get_url(key, expires_in=expires_in) for key in keys]

    # --- multipart uploads (dandizarr.objectstore.multipart) ------------------------------------

    def create_multipart_upload(self, key: str) -> str:
        """Start a multipart upload of ``key``; its upload id. Nothing is visible at ``key``
        until ``complete_multipart_upload``."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")

    def presigned_part_urls(
        self,
        key: str,
        upload_id: str,
        part_md5s: Sequence[str],
        *,
        expires_in: int,
        first_part: int = 1,
    ) -> builtins.list[str]:
        """A URL per part (numbers ``first_part``, ``first_part + 1``, ... in order: some of
        an upload's parts, a page at a time) that accepts one PUT of a body whose md5 is that
        part's, bound into its signature as ``presigned_put_url`` binds it."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")

    def list_parts(self, key: str, upload_id: str) -> builtins.list[UploadedPart]:
        """The parts storage holds of the upload, by number; ObjectNotFound when the upload is
        gone (completed or aborted)."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Sequence[tuple[int, str]]
    ) -> str:
        """Make ``key`` the ``(number, etag)`` parts, in order; the object's ETag."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Drop the upload and its parts (storage stops billing them); an upload already gone
        is fine."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")

    def list_multipart_uploads(self, prefix: str) -> Iterator[UnfinishedUpload]:
        """The multipart uploads under ``prefix`` that were neither completed nor aborted."""
        raise NotImplementedError(f"{type(self).__name__} takes no multipart uploads")
