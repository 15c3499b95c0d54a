"""The key-value store interface the sharding library reads and writes through.

Anything with byte-range reads works: a dict in memory, a local directory, or S3 through the
project's ``objectstore`` layer (``ObjectStoreKV``). ``CountingStore`` wraps any of them and
logs every request, so tests and benchmarks can count storage round trips.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from dandizarr.objectstore import ObjectNotFound, ObjectStore, PreconditionFailed
from dandizarr.sharding.index import ShardFormatError


class VersionMismatch(Exception):
    """A conditional read found the value changed since the version it was conditioned on."""


@dataclass(frozen=True, slots=True)
class RangeRead:
    data: bytes
    # Opaque token that changes whenever the value changes (an ETag); None if unknown.
    version: str | None


@runtime_checkable
class KeyValueStore(Protocol):
    """What the sharding library stores through.

    A missing key is an answer, not an error: ``get`` and ``get_range`` return None, ``delete``
    succeeds, ``list_prefix`` does not list it. (Shards are sparse: an absent one reads as fill
    value, so absence is the common case.) Errors are for the store failing.
    """

    def get(self, key: str) -> bytes | None:
        """The whole value, or None when absent."""

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        """Bytes ``[start, end)``; a negative ``start`` with ``end=None`` is a suffix.

        None when the key is absent. With ``if_version``, raises VersionMismatch when the value's
        version differs (one request: the check travels with the read).
        """

    def set(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None:
        """Delete the key; absent keys are fine."""

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Keys starting with ``prefix``, sorted."""


def get_bounded(store: KeyValueStore, key: str, limit: int | None) -> bytes | None:
    """The whole value at ``key`` (None when absent), reading at most ``limit`` + 1 bytes of
    it: a value longer than ``limit`` (the most an honest encoding of it could be) is refused
    with ``ShardFormatError`` before the rest of it is read. ``limit`` None: ``get``."""
    if limit is None:
        return store.get(key)
    got = store.get_range(key, 0, limit + 1)
    if got is None:
        return None
    if len(got.data) > limit:
        raise ShardFormatError(
            f"{key}: larger than any encoding of it by its codecs could be ({limit} bytes)"
        )
    return got.data


def _slice(value: bytes, start: int, end: int | None) -> bytes:
    if start < 0 and end is None:
        return value[start:] if -start <= len(value) else value
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"invalid byte range [{start}, {end})")
    return value[start:end]


def _file_version(stat: os.stat_result) -> str:
    return f"{stat.st_ino}-{stat.st_mtime_ns}-{stat.st_size}"


def _version_of(value: bytes) -> str:
    return hashlib.md5(value, usedforsecurity=False).hexdigest()


@dataclass
class MemoryStore:
    """A dict-backed store (versions are md5s of the values)."""

    data: dict[str, bytes] = field(default_factory=dict)

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        value = self.data.get(key)
        if value is None:
            return None
        version = _version_of(value)
        if if_version is not None and if_version != version:
            raise VersionMismatch(key)
        return RangeRead(_slice(value, start, end), version)

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = bytes(value)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return iter(sorted(k for k in self.data if k.startswith(prefix)))


@dataclass
class DirectoryStore:
    """Keys are files under ``root``; writes are atomic (temp file + rename).

    The version is ``<inode>-<mtime_ns>-<size>``: it changes on every rewrite without hashing.
    Kernels stamp mtimes from a coarse clock, so ``set`` moves the new file's mtime past the
    old one's: two same-size writes within one clock tick would otherwise share a version.
    """

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or any(part in {"", ".", ".."} for part in key.split("/")):
            raise ValueError(f"invalid key {key!r}")
        return self.root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        try:
            with open(self._path(key), "rb") as handle:
                stat = os.fstat(handle.fileno())
                version = _file_version(stat)
                if if_version is not None and if_version != version:
                    raise VersionMismatch(key)
                size = stat.st_size
                if start < 0 and end is None:
                    start = max(0, size + start)
                elif start < 0 or (end is not None and end < start):
                    raise ValueError(f"invalid byte range [{start}, {end})")
                handle.seek(start)
                length = (size if end is None else min(end, size)) - start
                return RangeRead(handle.read(max(0, length)), version)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(value)
                handle.flush()
                mtime = os.fstat(handle.fileno()).st_mtime_ns
                with contextlib.suppress(FileNotFoundError):
                    mtime = max(mtime, path.stat().st_mtime_ns + 1)
                os.utime(handle.fileno(), ns=(mtime, mtime))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        keys = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for name in filenames:
                if name.startswith(".tmp-"):
                    continue
                key = os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    keys.append(key)
        return iter(sorted(keys))


@dataclass
class ObjectStoreKV:
    """The project's object storage (S3 or local) under a key prefix, as a KeyValueStore."""

    store: ObjectStore
    prefix: str = ""

    def get(self, key: str) -> bytes | None:
        try:
            return self.store.get(self.prefix + key)
        except ObjectNotFound:
            return None

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        try:
            data, etag = self.store.read_range(self.prefix + key, start, end, if_match=if_version)
        except ObjectNotFound:
            return None
        except PreconditionFailed as error:
            raise VersionMismatch(key) from error
        return RangeRead(data, etag)

    def set(self, key: str, value: bytes) -> None:
        self.store.put(self.prefix + key, value)

    def delete(self, key: str) -> None:
        self.store.delete(self.prefix + key)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        for info in self.store.list(self.prefix + prefix):
            yield info.key[len(self.prefix) :]


@dataclass
class CountingStore:
    """Wraps a store and records every request as ``(operation, key)``."""

    inner: KeyValueStore
    requests: list[tuple[str, str]] = field(default_factory=list)

    def get(self, key: str) -> bytes | None:
        self.requests.append(("get", key))
        return self.inner.get(key)

    def get_range(
        self, key: str, start: int, end: int | None = None, *, if_version: str | None = None
    ) -> RangeRead | None:
        self.requests.append(("get_range", key))
        return self.inner.get_range(key, start, end, if_version=if_version)

    def set(self, key: str, value: bytes) -> None:
        self.requests.append(("set", key))
        self.inner.set(key, value)

    def delete(self, key: str) -> None:
        self.requests.append(("delete", key))
        self.inner.delete(key)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        self.requests.append(("list_prefix", prefix))
        return self.inner.list_prefix(prefix)

    def reset(self) -> None:
        self.requests.clear()
