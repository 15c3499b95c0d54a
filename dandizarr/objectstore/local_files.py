"""How the local backend keeps an object as a file: key -> path, atomic writes, md5 sidecars.

Each object is a plain file at ``root/<key>``. Writes go to a temp file in the object's
directory and are published with ``os.replace``, so readers see the old or the new object and a
crash never exposes a partial one.

ETags (the md5 of the body) are computed once, at write time, and kept in a sidecar file next
to the object (``.dandizarr-meta.<name>``, JSON). The sidecar is written *before* the object
is published and records the identity of the file it describes (device, inode, size and an
mtime the writer sets to a unique nanosecond value). A reader trusts the sidecar only when
that identity matches the file it has open; otherwise (a crash between the two renames, a
concurrent writer, a restored backup) it hashes the file once and repairs the sidecar.

This module owns those file rules and the errors they raise (``InvalidKey``, ``BadDigest``);
``dandizarr.objectstore.local`` builds the store on them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from dandizarr.objectstore.base import ObjectInfo, ObjectNotFound, ObjectStoreError, StorageFull
from dandizarr.objectstore.keys import RESERVED_PREFIX, SIDECAR_PREFIX, key_problem

TEMP_PREFIX = RESERVED_PREFIX + "tmp-"
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
    problem = key_problem(key)
    if problem is not None:
        raise InvalidKey(f"invalid key {key!r}: {problem}")
    return key.split("/")


# --- sidecars ---------------------------------------------------------------------------------


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


def meta_path(path: Path) -> Path:
    """The md5 sidecar of the object file at ``path``."""
    return path.with_name(SIDECAR_PREFIX + path.name)


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(meta_path(path).read_bytes())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def trusted_meta(path: Path, st: os.stat_result) -> dict[str, Any] | None:
    """The sidecar of ``path`` if it describes the very file ``st`` is of, else None."""
    meta = _read_meta(path)
    if meta is None or meta.get("identity") != _identity(st) or "md5" not in meta:
        return None
    return meta


def info_of_open(key: str, path: Path, handle: BinaryIO) -> tuple[ObjectInfo, str | None]:
    """Info and content type of the file ``handle`` has open: from the sidecar if it describes
    this very file, else by hashing it (and repairing the sidecar)."""
    st = os.fstat(handle.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise ObjectNotFound(key)
    meta = trusted_meta(path, st)
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
            meta_path(path),
            json.dumps({"md5": digest, "identity": _identity(st)}).encode(),
        )
    return ObjectInfo(key, st.st_size, digest), None


# --- writes -----------------------------------------------------------------------------------


def record_md5(path: Path, file: Path, md5: str) -> None:
    """The sidecar of the object at ``path``, for ``file`` (about to be renamed to it)."""
    meta = {"md5": md5, "identity": _identity(os.stat(file))}
    _write_atomically(meta_path(path), json.dumps(meta).encode())


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
class Staged:
    """An object written to a temp file next to its final place, not yet published."""

    key: str
    path: Path
    tmp: str
    meta: dict[str, Any]
    info: ObjectInfo


def stage(
    key: str,
    path: Path,
    chunks: Iterable[bytes],
    expected_md5: str | None,
    content_type: str | None,
    *,
    flush: bool,
) -> Staged:
    """Write the object to a temporary file next to its final place ``path``; BadDigest when
    ``expected_md5`` (lower-case hex) is given and the body has another md5."""
    if path.is_dir():
        raise ObjectStoreError(f"{key}: keys below it exist")
    fd, tmp = _temp_file_for(key, path)
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
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        raise_if_full(error, key)
        raise
    meta: dict[str, Any] = {"md5": digest, "identity": _identity(st)}
    if content_type:
        meta["content_type"] = content_type
    return Staged(key, path, tmp, meta, ObjectInfo(key, st.st_size, digest))


def publish(staged: Staged, *, sidecar: bool = True) -> ObjectInfo:
    """Give a staged object its name (atomically replacing the previous version)."""
    path, tmp = staged.path, staged.tmp
    try:
        # Sidecar first: until the rename below it describes no visible file, and readers
        # ignore a sidecar whose identity differs from the file they read.
        if sidecar:
            _write_atomically(meta_path(path), json.dumps(staged.meta).encode())
        try:
            os.replace(tmp, path)
        except IsADirectoryError as error:
            # Keys below it appeared meanwhile; the sidecar would keep their parent alive.
            meta_path(path).unlink(missing_ok=True)
            raise ObjectStoreError(f"{staged.key}: keys below it exist") from error
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        raise_if_full(error, staged.key)
        raise
    return staged.info


# A full volume, a user's quota: the write can only succeed once room is made.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})


def raise_if_full(error: BaseException, key: str) -> None:
    """StorageFull, from ``error``, when it says the filesystem has no room."""
    if isinstance(error, OSError) and error.errno in _NO_ROOM:
        raise StorageFull(key) from error


def _temp_file_for(key: str, path: Path) -> tuple[int, str]:
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


# --- flushing ---------------------------------------------------------------------------------


def flush_filesystem(root: Path) -> None:
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
