"""The local-filesystem backend: each object is a plain file at ``root/<key>``.

Writes go to a temp file in the object's directory and are published with ``os.replace``, so
readers see the old or the new object and a crash never exposes a partial one.

ETags (the md5 of the body) are computed once, at write time, and kept in a sidecar file next
to the object (``.dandizarr-meta.<name>``, JSON). The sidecar is written *before* the object
is published and records the identity of the file it describes (device, inode, size and an
mtime the writer sets to a unique nanosecond value). A reader trusts the sidecar only when
that identity matches the file it has open; otherwise (a crash between the two renames, a
concurrent writer, a restored backup) it hashes the file once and repairs the sidecar. So
``head`` is O(1) and never returns a wrong ETag.

Names starting with ``.dandizarr-`` are reserved (temp files, sidecars): keys may not use
them and listings never show them.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from objectstore import signing
from objectstore.base import (
    InvalidRange,
    Mapper,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
    check_md5_hex,
    strip_etag,
    validate_range,
)

RESERVED_PREFIX = ".dandizarr-"
TEMP_PREFIX = RESERVED_PREFIX + "tmp-"
META_PREFIX = RESERVED_PREFIX + "meta."
# Longest file name most filesystems accept, in bytes; the sidecar name must fit too.
_NAME_MAX = 255
_MAX_SEGMENT_BYTES = _NAME_MAX - len(META_PREFIX.encode())
_HASH_BLOCK = 1 << 20


class InvalidKey(ObjectStoreError, ValueError):
    """A key the local backend cannot store (it would escape the root or is reserved)."""


class BadDigest(ObjectStoreError):
    """The uploaded body's md5 is not the one it was announced with; nothing was stored."""

    def __init__(self, key: str, expected_md5: str, actual_md5: str) -> None:
        super().__init__(key, expected_md5, actual_md5)
        self.key = key
        self.expected_md5 = expected_md5
        self.actual_md5 = actual_md5

    def __str__(self) -> str:
        return f"{self.key}: body md5 {self.actual_md5} != announced {self.expected_md5}"


def key_segments(key: str) -> list[str]:
    """The ``/``-separated parts of a valid key; InvalidKey otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidKey(f"invalid key {key!r}: empty")
    if key.startswith("/"):
        raise InvalidKey(f"invalid key {key!r}: leading '/'")
    if "\x00" in key:
        raise InvalidKey(f"invalid key {key!r}: NUL character")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidKey(f"invalid key {key!r}: not encodable as UTF-8") from error
    segments = key.split("/")
    for segment in segments:
        if segment in {"", ".", ".."}:
            raise InvalidKey(f"invalid key {key!r}: empty, '.' or '..' segment")
        if segment.startswith(RESERVED_PREFIX):
            raise InvalidKey(
                f"invalid key {key!r}: names starting {RESERVED_PREFIX!r} are reserved"
            )
        if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
            raise InvalidKey(f"invalid key {key!r}: a segment is over {_MAX_SEGMENT_BYTES} bytes")
    return segments


def _identity(st: os.stat_result) -> dict[str, int]:
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def _unique_mtime_ns() -> int:
    # Millisecond wall time with random sub-millisecond digits: with the inode, no two
    # versions of an object share an identity even when written within one clock tick.
    now = time.time_ns()
    return now - now % 1_000_000 + secrets.randbelow(1_000_000)


def _meta_path(path: Path) -> Path:
    return path.with_name(META_PREFIX + path.name)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class _Staged:
    key: str
    path: Path
    tmp: str
    meta: dict[str, Any]
    info: ObjectInfo


def _flush_filesystem(root: Path) -> None:
    """Flush the dirty data and metadata of the filesystem holding ``root`` (syncfs(2))."""
    fd = os.open(root, os.O_RDONLY)
    try:
        if _libc is None or _libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syncfs  # noqa: B018 (present on Linux only)
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()


class LocalObjectStore(ObjectStore):
    def __init__(
        self, root: Path | str, *, public_url: str, secret_key: str, fsync: bool = True
    ) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.public_url = public_url.rstrip("/")
        # Presigned URLs point at the web app's storage view (zarr_api.local_storage_urls).
        self.storage_url = f"{self.public_url}/storage"
        self.secret_key = secret_key
        # Flush each object to disk before publishing it (a power loss then never exposes an
        # empty file under the new name). Tests may turn it off for speed.
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"LocalObjectStore(root={str(self.root)!r}, public_url={self.public_url!r})"

    def path_of(self, key: str) -> Path:
        return self.root.joinpath(*key_segments(key))

    # --- metadata -------------------------------------------------------------------------------

    def _read_meta(self, path: Path) -> dict[str, Any] | None:
        try:
            meta = json.loads(_meta_path(path).read_bytes())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _trusted_meta(self, path: Path, st: os.stat_result) -> dict[str, Any] | None:
        meta = self._read_meta(path)
        if meta is None or meta.get("identity") != _identity(st) or "md5" not in meta:
            return None
        return meta

    def _info_of_open(
        self, key: str, path: Path, handle: BinaryIO
    ) -> tuple[ObjectInfo, str | None]:
        """Info of the file ``handle`` has open: from the sidecar if it describes this very
        file, else by hashing it (and repairing the sidecar)."""
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ObjectNotFound(key)
        meta = self._trusted_meta(path, st)
        if meta is not None:
            return ObjectInfo(key, st.st_size, meta["md5"]), meta.get("content_type")
        md5 = hashlib.md5(usedforsecurity=False)
        offset = 0
        while block := os.pread(handle.fileno(), _HASH_BLOCK, offset):
            md5.update(block)
            offset += len(block)
        digest = md5.hexdigest()
        # Safe under concurrency: the identity is of the file we hold open (its inode cannot be
        # reused while open), so the record can only ever match this content.
        with contextlib.suppress(OSError):
            _write_atomically(
                _meta_path(path),
                json.dumps({"md5": digest, "identity": _identity(st)}).encode(),
            )
        return ObjectInfo(key, st.st_size, digest), None

    def open_object(self, key: str) -> tuple[BinaryIO, ObjectInfo, str | None]:
        """The open file of an object, its info and content type; the caller closes the file."""
        path = self.path_of(key)
        try:
            handle: BinaryIO = open(path, "rb")  # noqa: SIM115 (returned to the caller)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
            raise ObjectNotFound(key) from error
        try:
            info, content_type = self._info_of_open(key, path, handle)
        except BaseException:
            handle.close()
            raise
        return handle, info, content_type

    # --- writes ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        return self.put_stream(key, [data], content_type=content_type)

    def put_stream(
        self,
        key: str,
        chunks: Iterable[bytes],
        *,
        expected_md5: str | None = None,
        content_type: str | None = None,
    ) -> ObjectInfo:
        """Store the concatenated chunks, hashing them on the way.

        With ``expected_md5``, a body with another md5 raises BadDigest and nothing changes.
        """
        staged = self._stage(key, chunks, expected_md5, content_type, flush=self.fsync)
        return self._publish(staged)

    def put_many(self, items: Mapping[str, bytes], *, mapper: Mapper | None = None) -> None:
        """Group commit: stage every object, flush the filesystem once, publish them all by
        renames, flush once more. Two flushes instead of one per object (a .checksum tree
        update writes hundreds of small objects), with the same guarantee: no object is
        visible under its name before its bytes are on disk.

        Bulk-written objects get no md5 sidecar (half the file creations): they are small, and
        the first ``head`` hashes one and records its sidecar then."""
        if not self.fsync or len(items) <= 1:
            for key, data in items.items():
                self.put(key, data)
            return
        staged: list[_Staged] = []
        try:
            for key, data in items.items():
                staged.append(self._stage(key, [data], None, None, flush=False))
            _flush_filesystem(self.root)
            for item in staged:
                self._publish(item, sidecar=False)
            staged.clear()
            _flush_filesystem(self.root)
        finally:
            for leftover in staged:
                Path(leftover.tmp).unlink(missing_ok=True)

    def _stage(
        self,
        key: str,
        chunks: Iterable[bytes],
        expected_md5: str | None,
        content_type: str | None,
        *,
        flush: bool,
    ) -> _Staged:
        """Write the object to a temporary file next to its final place."""
        if expected_md5 is not None:
            expected_md5 = check_md5_hex(expected_md5)
        path = self.path_of(key)
        if path.is_dir():
            raise ObjectStoreError(f"{key}: keys below it exist")
        fd, tmp = self._temp_file_for(key, path)
        try:
            md5 = hashlib.md5(usedforsecurity=False)
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    md5.update(chunk)
                handle.flush()
                if flush:
                    os.fsync(handle.fileno())
                digest = md5.hexdigest()
                if expected_md5 is not None and digest != expected_md5:
                    raise BadDigest(key, expected_md5, digest)
                mtime = _unique_mtime_ns()
                os.utime(handle.fileno(), ns=(mtime, mtime))
                st = os.fstat(handle.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        meta: dict[str, Any] = {"md5": digest, "identity": _identity(st)}
        if content_type:
            meta["content_type"] = content_type
        return _Staged(key, path, tmp, meta, ObjectInfo(key, st.st_size, digest))

    def _publish(self, staged: _Staged, *, sidecar: bool = True) -> ObjectInfo:
        """Give a staged object its name (atomically replacing the previous version)."""
        path, tmp = staged.path, staged.tmp
        try:
            # Sidecar first: until the rename below it describes no visible file, and readers
            # ignore a sidecar whose identity differs from the file they read.
            if sidecar:
                _write_atomically(_meta_path(path), json.dumps(staged.meta).encode())
            try:
                os.replace(tmp, path)
            except IsADirectoryError as error:
                # Keys below it appeared meanwhile; the sidecar would keep their parent alive.
                _meta_path(path).unlink(missing_ok=True)
                raise ObjectStoreError(f"{staged.key}: keys below it exist") from error
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return staged.info

    def _temp_file_for(self, key: str, path: Path) -> tuple[int, str]:
        for _attempt in range(10):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                return tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
            except FileNotFoundError:
                # A concurrent delete pruned the (empty) directory in between; make it again.
                continue
            except (FileExistsError, NotADirectoryError) as error:
                raise ObjectStoreError(f"{key}: a prefix of it is an object") from error
        raise ObjectStoreError(f"{key}: could not create its directory")

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self.path_of(key)
            try:
                path.unlink()
            except (FileNotFoundError, NotADirectoryError):
                pass
            except IsADirectoryError:
                continue  # a "directory" key has no object
            _meta_path(path).unlink(missing_ok=True)
            self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Remove empty directories up to the root, so a deleted prefix can become a key."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    # --- reads ----------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        # No need for the md5 sidecar: only the bytes are asked for.
        try:
            handle = open(self.path_of(key), "rb")  # noqa: SIM115
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
            raise ObjectNotFound(key) from error
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ObjectNotFound(key)
            return handle.read()

    def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        return self.read_range(key, start, end)[0]

    def read_range(
        self, key: str, start: int, end: int | None = None, *, if_match: str | None = None
    ) -> tuple[bytes, str]:
        validate_range(start, end)
        handle, info, _type = self.open_object(key)
        with handle:
            # Like S3: the precondition is evaluated before the range.
            if if_match is not None and strip_etag(if_match) != info.etag:
                raise PreconditionFailed(key, strip_etag(if_match))
            begin, stop = resolve_range(key, info.size, start, end)
            return os.pread(handle.fileno(), stop - begin, begin), info.etag

    def iter_chunks(self, key: str, chunk_size: int = 8 << 20) -> Iterator[bytes]:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        # Opened now, so ObjectNotFound raises at call time as with S3.
        handle, _info, _type = self.open_object(key)

        def chunks() -> Iterator[bytes]:
            with handle:
                while block := handle.read(chunk_size):
                    yield block

        return chunks()

    def head(self, key: str) -> ObjectInfo | None:
        path = self.path_of(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        meta = self._trusted_meta(path, st)
        if meta is not None:
            return ObjectInfo(key, st.st_size, meta["md5"])
        try:
            handle, info, _type = self.open_object(key)
        except ObjectNotFound:
            return None
        handle.close()
        return info

    def list(
        self, prefix: str = "", *, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[ObjectInfo]:
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        # Start at the deepest directory the prefix names.
        directory_part = prefix.rpartition("/")[0]
        if directory_part:
            try:
                start_dir = self.path_of(directory_part)
            except InvalidKey:
                return iter(())  # no stored key can start with it
            return self._walk(start_dir, directory_part + "/", prefix, start_after)
        return self._walk(self.root, "", prefix, start_after)

    def _walk(
        self, directory: Path, key_prefix: str, prefix: str, start_after: str | None
    ) -> Iterator[ObjectInfo]:
        """Objects below ``directory`` in key order, lazily.

        Sorting each directory's entries with ``/`` appended to subdirectory names gives the
        global order: every key below ``d/`` sorts against a sibling name exactly as ``d/``
        does. Python orders str by code point, which for UTF-8 is byte order (S3's order).
        """
        try:
            with os.scandir(directory) as scan:
                entries = []
                for entry in scan:
                    if entry.name.startswith(RESERVED_PREFIX):
                        continue
                    try:
                        entry.name.encode("utf-8")
                    except UnicodeEncodeError:
                        continue  # not a name this store wrote (undecodable bytes)
                    is_dir = entry.is_dir(follow_symlinks=False)
                    entries.append((entry.name + "/" if is_dir else entry.name, is_dir))
        except (FileNotFoundError, NotADirectoryError):
            return
        entries.sort()
        for name, is_dir in entries:
            full = key_prefix + name
            if is_dir:
                if not (full.startswith(prefix) or prefix.startswith(full)):
                    continue
                if (
                    start_after is not None
                    and start_after >= full
                    and not start_after.startswith(full)
                ):
                    continue  # everything below sorts before start_after
                yield from self._walk(directory / name[:-1], full, prefix, start_after)
            elif full.startswith(prefix) and (start_after is None or full > start_after):
                try:
                    info = self.head(full)
                except InvalidKey:
                    continue  # a file this store did not write (e.g. a name too long)
                if info is not None:  # deleted since the scan
                    yield info

    # --- presigned URLs -------------------------------------------------------------------------

    def presigned_put_url(self, key: str, md5_hex: str, *, expires_in: int) -> str:
        key_segments(key)
        return signing.presigned_url(
            self.storage_url,
            self.secret_key,
            "PUT",
            key,
            expires_in=expires_in,
            md5_hex=check_md5_hex(md5_hex),
        )

    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        key_segments(key)
        return signing.presigned_url(
            self.storage_url, self.secret_key, "GET", key, expires_in=expires_in
        )

    def verify_request(
        self, method: str, key: str, query: dict[str, str], *, now: float | None = None
    ) -> signing.Verified:
        """Check a presigned request's query parameters (for the storage view)."""
        return signing.verify(self.secret_key, method, key, query, now=now)


def resolve_range(key: str, size: int, start: int, end: int | None) -> tuple[int, int]:
    """``[begin, stop)`` offsets of the range in an object of ``size`` bytes (see
    ``ObjectStore.get_range``); InvalidRange when ``start`` is past the end."""
    validate_range(start, end)
    if start < 0:
        return max(0, size + start), size
    if start > size:
        raise InvalidRange(f"{key}: start {start} is past the end ({size} bytes)")
    return start, size if end is None else min(end, size)
