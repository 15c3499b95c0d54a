"""The local-filesystem backend (``LocalObjectStore``): each object is a plain file at
``root/<key>``, with presigned URLs served by the web app
(``dandizarr_server.zarr_api.views.local_storage``).

This module owns the store's public surface and re-exports the names its users need
(``InvalidKey``, ``BadDigest``, ``TEMP_PREFIX``). How an object is kept as a file (atomic
writes, md5 sidecars and when to trust them, flushing) lives in
``dandizarr.objectstore.local_files``;
the key-ordered directory walk behind ``list`` in ``dandizarr.objectstore.local_listing``.

``head`` is O(1) and never returns a wrong ETag. Names starting with ``.dandizarr-`` are
reserved (temp files, sidecars): keys may not use them and listings never show them.
"""

from __future__ import annotations

import builtins
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from dandizarr.objectstore import signing
from dandizarr.objectstore.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    PreconditionFailed,
    resolve_range,
    validate_range,
)
from dandizarr.objectstore.digests import check_md5_hex, strip_etag
from dandizarr.objectstore.local_files import (
    TEMP_PREFIX,
    BadDigest,
    InvalidKey,
    Staged,
    flush_filesystem,
    info_of_open,
    key_segments,
    meta_path,
    publish,
    stage,
    trusted_meta,
)
from dandizarr.objectstore.local_listing import walk_keys
from dandizarr.objectstore.local_versions import (
    CURRENT_PREFIX,
    VERSIONS_DIRECTORY,
    RetainedVersions,
    content_of,
    current_id,
)
from dandizarr.objectstore.versions import ObjectVersion

__all__ = ["TEMP_PREFIX", "BadDigest", "InvalidKey", "LocalObjectStore", "resolve_range"]


class LocalObjectStore(ObjectStore):
    """An ObjectStore in a directory tree, its presigned URLs signed with ``secret_key``."""

    def __init__(
        self, root: Path | str, *, public_url: str, secret_key: str, fsync: bool = True
    ) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.public_url = public_url.rstrip("/")
        # Presigned URLs point at the web app's storage view
        # (dandizarr_server.zarr_api.routes.local_storage).
        self.storage_url = f"{self.public_url}/storage"
        self.secret_key = secret_key
        # Flush each object to disk before publishing it (a power loss then never exposes an
        # empty file under the new name). Tests may turn it off for speed.
        self.fsync = fsync
        # Replaced objects, once versioning is enabled (dandizarr.objectstore.local_versions).
        self.retained = RetainedVersions(self.root / VERSIONS_DIRECTORY, self.root)

    def __repr__(self) -> str:
        return f"LocalObjectStore(root={str(self.root)!r}, public_url={self.public_url!r})"

    def path_of(self, key: str) -> Path:
        return self.root.joinpath(*key_segments(key))

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
        if expected_md5 is not None:
            expected_md5 = check_md5_hex(expected_md5)
        path = self.path_of(key)
        staged = stage(key, path, chunks, expected_md5, content_type, flush=self.fsync)
        return self._publish_retaining(staged)

    def _publish_retaining(self, staged: Staged, *, sidecar: bool = True) -> ObjectInfo:
        kept = self.retained.retain(staged.key, staged.path)
        info = publish(staged, sidecar=sidecar)
        self.retained.replaced(kept)
        return info

    def put_stream_if(
        self,
        key: str,
        chunks: Iterable[bytes],
        admit: Callable[[Callable[[], ObjectInfo]], ObjectInfo | None],
        *,
        expected_md5: str | None = None,
        content_type: str | None = None,
    ) -> ObjectInfo | None:
        """``put_stream`` in two steps: the bytes are written aside, then ``admit`` is called
        with the step that makes them visible under ``key``; it calls that step (returning its
        result) or not (None: nothing changes). Lets a caller decide, at the moment of the
        write and under its own locks, whether the write may still happen."""
        if expected_md5 is not None:
            expected_md5 = check_md5_hex(expected_md5)
        staged = stage(key, self.path_of(key), chunks, expected_md5, content_type, flush=self.fsync)
        try:
            return admit(lambda: self._publish_retaining(staged))
        finally:
            Path(staged.tmp).unlink(missing_ok=True)

    def put_many(self, items: Mapping[str, bytes]) -> None:
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
        staged: list[Staged] = []
        try:
            for key, data in items.items():
                staged.append(stage(key, self.path_of(key), [data], None, None, flush=False))
            flush_filesystem(self.root)
            # Not kept as versions: bulk writes are .checksum listings, which archive versions
            # never read (dandizarr_server.zarr_api.selectors.version_trees).
            for item in staged:
                publish(item, sidecar=False)
            staged.clear()
            flush_filesystem(self.root)
        finally:
            for leftover in staged:
                Path(leftover.tmp).unlink(missing_ok=True)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self.path_of(key)
            kept = self.retained.retain(key, path)
            try:
                path.unlink()
            except (FileNotFoundError, NotADirectoryError):
                pass
            except IsADirectoryError:
                continue  # a "directory" key has no object
            self.retained.replaced(kept)
            meta_path(path).unlink(missing_ok=True)
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

    def open_object(self, key: str) -> tuple[BinaryIO, ObjectInfo, str | None]:
        """The open file of an object, its info and content type; the caller closes the file."""
        path = self.path_of(key)
        try:
            handle: BinaryIO = open(path, "rb")  # noqa: SIM115 (returned to the caller)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
            raise ObjectNotFound(key) from error
        try:
            info, content_type = info_of_open(key, path, handle)
        except BaseException:
            handle.close()
            raise
        return handle, info, content_type

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
        meta = trusted_meta(path, st)
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
            return self._infos(walk_keys(start_dir, directory_part + "/", prefix, start_after))
        return self._infos(walk_keys(self.root, "", prefix, start_after))

    def _infos(self, keys: Iterator[str]) -> Iterator[ObjectInfo]:
        for key in keys:
            try:
                info = self.head(key)
            except InvalidKey:
                continue  # a file this store did not write (e.g. a name too long)
            if info is not None:  # deleted since the scan
                yield info

    # --- versions (dandizarr.objectstore.local_versions) -----------------------------------------

    def enable_versioning(self) -> None:
        self.retained.enable()

    def versioning_enabled(self) -> bool:
        return self.retained.enabled

    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        return self.retained.versions(prefix, self.list(prefix))

    def get_version_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        validate_range(start, end)
        md5 = content_of(version_id)
        try:
            handle, info, _type = self.open_object(key)
        except ObjectNotFound:
            handle, info = None, None
        if handle is None or info is None or info.etag != md5:
            if handle is not None:
                handle.close()
            handle = self.retained.open(key, md5)
        with handle:
            return os.pread(handle.fileno(), end - start, start)

    def find_version(self, key: str, etag: str | None) -> ObjectVersion | None:
        """Version ids are md5s here: the current object or a kept file of that name."""
        current = self.head(key)
        if current is not None and etag in (None, current.etag):
            modified = datetime.fromtimestamp(os.stat(self.path_of(key)).st_mtime, UTC)
            return ObjectVersion(
                key,
                current_id(current.etag),
                current.etag,
                current.size,
                True,
                False,
                None,
                modified,
            )
        if etag is None:
            return next((v for v in self.list_versions(key) if v.key == key), None)
        try:
            st = os.stat(self.retained.path(key, etag))
        except (FileNotFoundError, NotADirectoryError):
            return None
        replaced = datetime.fromtimestamp(st.st_mtime, UTC)
        return ObjectVersion(key, etag, etag, st.st_size, False, False, replaced, replaced)

    def restore_version(self, key: str, version_id: str) -> None:
        current = self.head(key)
        version_id = content_of(version_id)
        if current is not None and current.etag == version_id:
            return
        path = self.path_of(key)
        kept = self.retained.retain(key, path)
        self.retained.link_back(key, version_id, path)
        self.retained.replaced(kept)

    def delete_versions(self, versions: Iterable[tuple[str, str]]) -> None:
        """A kept version's file, or (``current:<md5>``) the current object if it still has
        that content."""
        for key, version_id in versions:
            if not version_id.startswith(CURRENT_PREFIX):
                self.retained.delete_one(key, version_id)
                continue
            current = self.head(key)
            if current is not None and current.etag == content_of(version_id):
                path = self.path_of(key)
                path.unlink(missing_ok=True)
                meta_path(path).unlink(missing_ok=True)
                self._prune(path.parent)

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

    def presigned_put_urls_with_acl(
        self, keys: Sequence[str], acl: str, *, expires_in: int
    ) -> builtins.list[str]:
        for key in keys:
            key_segments(key)
        return [
            signing.presigned_url(
                self.storage_url, self.secret_key, "PUT", key, expires_in=expires_in, acl=acl
            )
            for key in keys
        ]

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
