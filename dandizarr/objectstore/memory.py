"""An in-memory backend (``MemoryObjectStore``): a dict of keys to bytes behind one lock.

Pure library: no Django, no disk, no network. It keeps S3's semantics where the interface leaves
them to the backend: keys listed in UTF-8 byte order, ``start_after`` a position in that order,
md5 ETags for single PUTs and S3's composite ETag for multipart uploads (5 MiB minimum part),
versioning as S3's (version ids, delete markers). For tests of code above the store, and for
the contract suite (``dandizarr.testing.store_contract``) as its reference backend.

Presigned URLs need an HTTP server to answer them; this store has none, so they raise
NotImplementedError (the contract runs its URL tests only on stores that serve them). Parts of
a multipart upload arrive through ``upload_part`` instead of a part URL.
"""

from __future__ import annotations

import bisect
import builtins
import hashlib
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dandizarr.objectstore.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
    resolve_range,
    validate_range,
)
from dandizarr.objectstore.digests import strip_etag
from dandizarr.objectstore.multipart import (
    MAX_PARTS,
    MIN_PART,
    UnfinishedUpload,
    UploadedPart,
    composite_etag,
)
from dandizarr.objectstore.versions import ObjectVersion, with_replacement_times

__all__ = ["MemoryObjectStore"]


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class _Version:
    """One version of a key; ``data`` None is a delete marker."""

    version_id: str
    data: bytes | None
    etag: str
    modified: datetime


@dataclass(slots=True)
class _Upload:
    key: str
    initiated: datetime
    parts: dict[int, bytes] = field(default_factory=dict)


class MemoryObjectStore(ObjectStore):
    """An ObjectStore in this process' memory; safe to share between threads."""

    takes_multipart = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Each key's versions, oldest first; the last is current (a delete marker: no object).
        # Without versioning a key keeps only its current version.
        self._versions: dict[str, list[_Version]] = {}
        # The keys with a current object, in byte order (Python orders str by code point, which
        # is UTF-8 byte order): what ``list`` walks.
        self._sorted: list[str] = []
        self._versioning = False
        self._uploads: dict[str, _Upload] = {}
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"MemoryObjectStore({len(self._sorted)} objects)"

    # --- under the lock -------------------------------------------------------------------------

    def _current(self, key: str) -> _Version | None:
        versions = self._versions.get(key)
        if not versions or versions[-1].data is None:
            return None
        return versions[-1]

    def _write(self, key: str, data: bytes | None, etag: str) -> _Version:
        version = _Version(f"v{next(self._ids):012d}", data, etag, datetime.now(UTC))
        had = self._current(key) is not None
        if self._versioning:
            self._versions.setdefault(key, []).append(version)
        elif data is None:
            self._versions.pop(key, None)
        else:
            self._versions[key] = [version]
        if had and data is None:
            del self._sorted[bisect.bisect_left(self._sorted, key)]
        elif not had and data is not None:
            bisect.insort(self._sorted, key)
        return version

    def _object(self, key: str) -> _Version:
        current = self._current(key)
        if current is None:
            raise ObjectNotFound(key)
        return current

    # --- objects --------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        data = bytes(data)
        etag = _md5(data)
        with self._lock:
            self._write(key, data, etag)
        return ObjectInfo(key, len(data), etag)

    def get(self, key: str) -> bytes:
        with self._lock:
            data = self._object(key).data
        assert data is not None
        return data

    def read_range(
        self, key: str, start: int, end: int | None = None, *, if_match: str | None = None
    ) -> tuple[bytes, str]:
        validate_range(start, end)
        with self._lock:
            current = self._object(key)
        assert current.data is not None
        # As S3: the precondition is evaluated before the range.
        if if_match is not None and strip_etag(if_match) != current.etag:
            raise PreconditionFailed(key, strip_etag(if_match))
        begin, stop = resolve_range(key, len(current.data), start, end)
        return current.data[begin:stop], current.etag

    def iter_chunks(self, key: str, chunk_size: int = 8 << 20) -> Iterator[bytes]:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        data = self.get(key)  # now, so ObjectNotFound raises at call time
        return (data[at : at + chunk_size] for at in range(0, len(data), chunk_size))

    def head(self, key: str) -> ObjectInfo | None:
        with self._lock:
            current = self._current(key)
        if current is None or current.data is None:
            return None
        return ObjectInfo(key, len(current.data), current.etag)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[ObjectInfo]:
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        return self._listing(prefix, start_after, page_size)

    def _listing(
        self, prefix: str, start_after: str | None, page_size: int
    ) -> Iterator[ObjectInfo]:
        # A page at a time under the lock, as a server would: writes between pages are seen.
        after = start_after if start_after is not None and start_after >= prefix else None
        while True:
            with self._lock:
                at = (
                    bisect.bisect_left(self._sorted, prefix)
                    if after is None
                    else bisect.bisect_right(self._sorted, after)
                )
                page: builtins.list[ObjectInfo] = []
                for key in self._sorted[at : at + page_size]:
                    if not key.startswith(prefix):
                        break
                    data = self._versions[key][-1].data
                    assert data is not None
                    page.append(ObjectInfo(key, len(data), self._versions[key][-1].etag))
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].key

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            with self._lock:
                if self._current(key) is not None:
                    self._write(key, None, "")

    # --- presigned URLs: no server to answer them -----------------------------------------------

    def presigned_put_url(self, key: str, md5_hex: str, *, expires_in: int) -> str:
        raise NotImplementedError("MemoryObjectStore serves no HTTP: it signs no URLs")

    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        raise NotImplementedError("MemoryObjectStore serves no HTTP: it signs no URLs")

    # --- versions -------------------------------------------------------------------------------

    def enable_versioning(self) -> None:
        with self._lock:
            self._versioning = True

    def versioning_enabled(self) -> bool:
        return self._versioning

    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        with self._lock:
            rows = [
                (key, v.version_id, v.etag, 0 if v.data is None else len(v.data),
                 v.data is None, v.modified)
                for key in sorted(k for k in self._versions if k.startswith(prefix))
                for v in reversed(self._versions[key])
            ]  # fmt: skip
        return with_replacement_times(rows)

    def _version(self, key: str, version_id: str) -> _Version:
        for version in self._versions.get(key, []):
            if version.version_id == version_id and version.data is not None:
                return version
        raise ObjectNotFound(key)

    def get_version_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        validate_range(start, end)
        with self._lock:
            data = self._version(key, version_id).data
        assert data is not None
        return data[start:end]

    def delete_versions(self, versions: Iterable[tuple[str, str]]) -> None:
        for key, version_id in versions:
            with self._lock:
                kept = self._versions.get(key, [])
                had = self._current(key) is not None
                kept[:] = [v for v in kept if v.version_id != version_id]
                if not kept:
                    self._versions.pop(key, None)
                has = self._current(key) is not None
                if had and not has:
                    del self._sorted[bisect.bisect_left(self._sorted, key)]
                elif has and not had:
                    bisect.insort(self._sorted, key)

    def restore_version(self, key: str, version_id: str) -> None:
        # A copy inside storage (S3's CopyObject): the version becomes current again.
        with self._lock:
            version = self._version(key, version_id)
            if self._current(key) is not version:
                self._write(key, version.data, version.etag)

    # --- multipart uploads ----------------------------------------------------------------------

    def create_multipart_upload(self, key: str) -> str:
        with self._lock:
            upload_id = f"u{next(self._ids):012d}"
            self._uploads[upload_id] = _Upload(key, datetime.now(UTC))
        return upload_id

    def _upload(self, key: str, upload_id: str) -> _Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise ObjectNotFound(key)
        return upload

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> str:
        """Store part ``number`` of the upload (what a PUT to a part URL does); its ETag."""
        if not 1 <= number <= MAX_PARTS:
            raise ObjectStoreError(f"InvalidArgument: part number {number} not in 1..{MAX_PARTS}")
        with self._lock:
            self._upload(key, upload_id).parts[number] = bytes(data)
        return _md5(data)

    def list_parts(self, key: str, upload_id: str) -> builtins.list[UploadedPart]:
        with self._lock:
            parts = sorted(self._upload(key, upload_id).parts.items())
        return [UploadedPart(number, _md5(data), len(data)) for number, data in parts]

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Sequence[tuple[int, str]]
    ) -> str:
        with self._lock:
            held = self._upload(key, upload_id).parts
            numbers = [number for number, _etag in parts]
            if not parts or numbers != sorted(set(numbers)):
                raise ObjectStoreError("InvalidPartOrder: parts must ascend, each once")
            bodies = []
            for number, etag in parts:
                data = held.get(number)
                if data is None or _md5(data) != strip_etag(etag):
                    raise ObjectStoreError(f"InvalidPart: part {number} is not the one stored")
                bodies.append(data)
            if any(len(data) < MIN_PART for data in bodies[:-1]):
                raise ObjectStoreError("EntityTooSmall: a part but the last is under 5 MiB")
            etag = composite_etag([strip_etag(etag) for _number, etag in parts])
            self._write(key, b"".join(bodies), etag)
            del self._uploads[upload_id]
        return etag

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        with self._lock:
            upload = self._uploads.get(upload_id)
            if upload is not None and upload.key == key:
                del self._uploads[upload_id]

    def list_multipart_uploads(self, prefix: str) -> Iterator[UnfinishedUpload]:
        with self._lock:
            found = [
                UnfinishedUpload(upload.key, upload_id, upload.initiated)
                for upload_id, upload in self._uploads.items()
                if upload.key.startswith(prefix)
            ]
        return iter(sorted(found, key=lambda u: (u.key, u.initiated)))
