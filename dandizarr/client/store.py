"""``ArchiveStore``: a zarr-python 3 store over one archive of a dandizarr service.

``zarr.open_array(store=ArchiveStore(server, zarr_id), mode="r")`` (or ``zarr.open_group``,
``zarr.open``) reads any archive the service holds, zarr v2 or v3, without downloading it.

``ArchiveStore(server, zarr_id, token=..., read_only=False)`` writes into the draft as one
write session (docs/writing.md; ``store_session``, ``store_writes``): reads see the session's
writes over the draft, ``commit()`` makes all of it visible at once.

How a key is read (docs/api.md):

* The first read of a key asks for its file entry (``GET .../tree/{key}``: presigned
  ``download_url``, size, md5; 404 when absent). The entry, or its absence, is cached. A read
  never lists a whole directory: a Zarr v2 array's may hold a million chunks.
* Listing operations (``list_dir``, ``list_prefix``) list a directory once (every page); keys
  of a listed directory are answered from the listing, and only their URL is asked for.
* The bytes come from the download URL, with an HTTP ``Range`` header for partial reads: once
  the entry is cached, one read is one storage request. An expired URL (403 from storage) or a
  file that changed or vanished since it was listed makes the store forget what it knew about
  the key and ask the service again, once.
* Whole-file reads are checked against the size and md5 the service's tree records.
* A file packed into a shard (sharded archives, docs/sharded.md) has ``shard: {"key", "offset",
  "length"}`` in its entry and the shard's URL as its download URL: every read of it, whole or
  partial, is one ``Range`` request inside ``offset .. offset + length - 1`` of the shard.

The store is a snapshot in the sense that listings are cached for its lifetime; call
``invalidate()`` to forget them (e.g. after the archive was changed by an upload).
Blocking HTTP runs in worker threads (``asyncio.to_thread``) through the client's
``ApiClient`` (``store.client``): its pooled sessions, one for the service (with the token, if
any) and one for storage (never with the token), and its one retry policy
(``dandizarr.client.retry``, ``retry=`` to change it) for both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import quote

try:
    import zarr  # noqa: F401
except ImportError as error:  # zarr is not a dependency of the service or the upload client
    raise ImportError("ArchiveStore needs zarr-python 3: pip install 'zarr>=3,<4'") from error
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import ClientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.retry import RetryPolicy
from dandizarr.client.store_reads import (
    DirectoryListing,
    FileEntry,
    StaleEntry,
    StorageReads,
    range_header,
    split_key,
)
from dandizarr.client.store_session import WritableStore
from dandizarr.client.store_writes import SessionWrites, files_with_changes, names_with_changes

POOL_SIZE = 32
# PUTs of a write session in flight at once (store_writes: one thread, on libcurl).
PUT_JOBS = 32
PAGE_SIZE = 1000  # the service's largest page_size
RECURSIVE_LIMIT = 10000  # the service's largest limit for recursive listings


class ArchiveStore(WritableStore):
    """A zarr store over archive ``zarr_id`` of the service at ``server_url``: read-only, or
    (``read_only=False``) writing into write session ``session_id`` (a new one when None)."""

    supports_listing = True

    def __init__(
        self,
        server_url: str,
        zarr_id: str,
        token: str | None = None,
        *,
        read_only: bool = True,
        timeout: float = 60.0,
        page_size: int = PAGE_SIZE,
        recursive_limit: int = RECURSIVE_LIMIT,
        retry: RetryPolicy | None = None,
        session_id: str | None = None,
        read_id: str | None = None,
    ) -> None:
        self._writes: SessionWrites | None = None
        super().__init__(read_only=read_only)
        self.server_url = server_url.rstrip("/")
        self.zarr_id = zarr_id
        self.token = token
        self.timeout = timeout
        self.page_size = page_size  # entries per page of a directory listing
        self.recursive_limit = recursive_limit  # files per page of a recursive listing
        self.retry = retry
        # The client's API client: its sessions, errors and retry policy are the store's.
        self.client = ApiClient(
            self.server_url, token, jobs=POOL_SIZE, retry=retry, timeout=timeout
        )
        self._reads = StorageReads(self.client, zarr_id, count=self._count_storage_request)
        self._lock = threading.Lock()
        self._directories: dict[str, DirectoryListing | None] = {}  # None: no such directory
        # Keys looked up one by one (with their URLs), None when absent: a read never lists a
        # whole directory (a Zarr v2 array's may hold a million chunks).
        self._entries: dict[str, FileEntry | None] = {}
        self._directory_locks: dict[str, threading.Lock] = {}
        # Requests made, for the curious (and the tests): service calls and storage reads.
        self.api_requests = 0
        self.storage_requests = 0
        # What the draft is read by: the archive's id, or in a session its snapshot's (the
        # draft as the session began: its reads see its own writes over that, whatever
        # commits meanwhile; docs/writing.md).
        self.read_id = zarr_id
        began = not read_only and session_id is None
        if began:
            session = self.client.begin_session(zarr_id)
            session_id, read_id = str(session["session_id"]), session.get("read_id")
        elif session_id is not None and read_id is None:
            read_id = self.client.get_session(zarr_id, session_id).get("read_id")
        if read_id:
            self.read_id = str(read_id)
        if session_id is not None:  # read-only too: zarr's mode="r" copy reads the session
            # The store that began the session writes behind (its commit flushes); a copy
            # joining it (a Dask worker's) writes through: no one flushes it before the commit.
            self._writes = SessionWrites(
                self.client, zarr_id, session_id, behind=began, jobs=PUT_JOBS
            )

    # --- identity ------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ArchiveStore)
            and self.server_url == other.server_url
            and self.zarr_id == other.zarr_id
            and self.session_id == other.session_id
        )

    def __hash__(self) -> int:
        return hash((type(self), self.server_url, self.zarr_id, self.session_id))

    def __repr__(self) -> str:
        session = f", session_id={self.session_id!r}" if self.session_id else ""
        return f"ArchiveStore({self.server_url!r}, {self.zarr_id!r}{session})"

    def __str__(self) -> str:
        return f"{self.server_url}/api/zarr/{self.zarr_id}/tree/"

    def with_read_only(self, read_only: bool = False) -> ArchiveStore:
        """The same archive and session (if any; its writes in this process shared), read-only
        or writing (into a new session when this store has none)."""
        copy = ArchiveStore(
            self.server_url,
            self.zarr_id,
            self.token,
            read_only=read_only,
            session_id=self.session_id,
            read_id=self.read_id if self.session_id is not None else None,
            **self._options(),
        )
        if self._writes is not None:
            # In this process, one session's writes are one pipeline: the copy reads the
            # writes still in flight, and the commit of either flushes both's.
            copy._writes = self._writes
        return copy

    def _options(self) -> dict[str, Any]:
        return {
            "timeout": self.timeout,
            "page_size": self.page_size,
            "recursive_limit": self.recursive_limit,
            "retry": self.retry,
        }

    def __getstate__(self) -> dict[str, Any]:
        # What the store is, never a connection: a Dask worker's copy joins the same session.
        # The copy reads what this store wrote (the array's metadata): written behind, it
        # must be in storage first.
        if self._writes is not None and not self._writes.ended:
            self._writes.flush()
        return {
            "server_url": self.server_url,
            "zarr_id": self.zarr_id,
            "token": self.token,
            "read_only": self.read_only,
            "session_id": self.session_id,
            "read_id": self.read_id if self.session_id is not None else None,
            **self._options(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.__init__(  # type: ignore[misc]
            state.pop("server_url"), state.pop("zarr_id"), state.pop("token"), **state
        )

    def close(self) -> None:
        super().close()
        self.client.close()

    def invalidate(self) -> None:
        """Forget every cached listing and file entry."""
        with self._lock:
            self._directories.clear()
            self._entries.clear()

    # --- HTTP --------------------------------------------------------------------------------

    def _files_url(self, path: str) -> str:
        return f"/api/zarr/{quote(self.read_id, safe='')}/tree/{quote(path)}"

    def _api_get(self, url: str, params: dict[str, Any] | None = None) -> Any | None:
        """The JSON answer of a GET to the service (a path, or a ``next`` URL it gave); None
        on 404. Other errors are the API client's (``ApiError`` and its kinds)."""
        with self._lock:
            self.api_requests += 1
        response = self.client.request("GET", url, params=params, expect=(200, 404))
        return None if response.status_code == 404 else response.json()

    # --- opening ----------------------------------------------------------------------------

    def _check_archive(self) -> None:
        if self._api_get(f"/api/zarr/{quote(self.zarr_id, safe='')}/") is None:
            raise FileNotFoundError(f"no zarr archive {self.zarr_id} on {self.server_url}")

    async def _open(self) -> None:
        """Check that the archive exists (one request), so a wrong id is not an empty store."""
        await asyncio.to_thread(self._check_archive)
        if not self._is_open:  # concurrent first calls (asyncio.gather of gets) each open it
            await super()._open()

    # --- listings and entries ----------------------------------------------------------------

    def _fetch_directory(self, path: str) -> DirectoryListing | None:
        """List directory ``path`` from the service (every page); None when it is not one."""
        answer = self._api_get(self._files_url(path), {"page_size": self.page_size})
        if answer is None or answer.get("type") != "directory":
            return None
        directory = DirectoryListing()
        while True:
            for item in answer["results"]:
                if item["type"] == "directory":
                    directory.directories.add(item["name"])
                else:
                    directory.files[item["name"]] = FileEntry(int(item["size"]), item["digest"])
            if not answer.get("next"):
                return directory
            answer = self._api_get(answer["next"])
            if answer is None:  # the listing shrank under us: list it again
                return self._fetch_directory(path)

    def _directory(self, path: str, *, refresh: bool = False) -> DirectoryListing | None:
        """Directory ``path``'s listing, fetched once however many threads ask at a time."""
        with self._lock:
            if not refresh and path in self._directories:
                return self._directories[path]
            lock = self._directory_locks.setdefault(path, threading.Lock())
        with lock:
            with self._lock:
                if not refresh and path in self._directories:
                    return self._directories[path]
            directory = self._fetch_directory(path)
            with self._lock:
                self._directories[path] = directory
            return directory

    def _entry(self, key: str, *, with_url: bool) -> FileEntry | None:
        """The key's entry, None when the archive holds no such file.

        From a listing already fetched (``list_dir`` and friends) when there is one, else from
        the key's own file entry: one request, which also gives its download URL.
        """
        parent, name = split_key(key)
        with self._lock:
            if key in self._entries:
                return self._entries[key]
            listed = parent in self._directories
            directory = self._directories.get(parent)
        if listed:
            entry = directory.files.get(name) if directory is not None else None
            if entry is None or not with_url or entry.url is not None:
                return entry
        answer = self._api_get(self._files_url(key))
        if answer is None or answer.get("type") != "file":  # absent, or a directory
            with self._lock:
                self._entries[key] = None
            return None
        file = RemoteFile.from_json(answer)
        entry = FileEntry(file.size, file.digest, file.download_url, file.shard_offset)
        with self._lock:
            self._entries[key] = entry
            if directory is not None:
                directory.files[name] = entry
        return entry

    def _forget(self, key: str) -> None:
        """Drop the listing ``key`` was found in, so the next look-up asks the service again."""
        parent, _ = split_key(key)
        with self._lock:
            self._directories.pop(parent, None)
            self._entries.pop(key, None)

    # --- reading -----------------------------------------------------------------------------

    def _count_storage_request(self) -> None:
        with self._lock:
            self.storage_requests += 1

    def _get_sync(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        if self._writes is not None:
            cached = self._writes.cached(key)
            if cached is not None:
                return cached[range_header(byte_range, len(cached))[1]]
            changed, staged = self._writes.lookup(key, with_url=True)
            if changed:
                return None if staged is None else self._reads.file(staged, byte_range)
        for attempt in range(2):
            entry = self._entry(key, with_url=False)
            if entry is None:
                return None
            start, stop, _ = range_header(byte_range, entry.size)[1].indices(entry.size)
            if stop <= start:  # an empty file, or a range past its end: nothing to fetch
                return b""
            entry = self._entry(key, with_url=True)
            if entry is None:
                return None
            try:
                return self._reads.file(entry, byte_range)
            except StaleEntry:
                if attempt:
                    raise ClientError(
                        f"{key} of archive {self.zarr_id}: storage does not match the service's "
                        "record of it (changed while being read?)"
                    ) from None
                self._forget(key)
        raise AssertionError("unreachable")

    async def get(
        self,
        key: str,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        await self._ensure_open()
        data = await asyncio.to_thread(self._get_sync, key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return list(
            await asyncio.gather(
                *(self.get(key, prototype, byte_range) for key, byte_range in key_ranges)
            )
        )

    async def exists(self, key: str) -> bool:
        await self._ensure_open()
        return await asyncio.to_thread(self._file_entry, key) is not None

    async def getsize(self, key: str) -> int:
        await self._ensure_open()
        entry = await asyncio.to_thread(self._file_entry, key)
        if entry is None:
            raise FileNotFoundError(key)
        return entry.size

    async def getsize_prefix(self, prefix: str) -> int:
        await self._ensure_open()
        return sum(size for _, size in await asyncio.to_thread(self._files_below, prefix))

    # --- listing -----------------------------------------------------------------------------

    def _files_below(self, prefix: str) -> list[tuple[str, int]]:
        """Every (key, size) starting with ``prefix``, in path order: the draft's, with the
        session's changes over them."""
        found = self._draft_files_below(prefix)
        if self._writes is None:
            return found
        return files_with_changes(found, self._writes.changes(prefix))

    def _draft_files_below(self, prefix: str) -> list[tuple[str, int]]:
        """Every (key, size) of the draft starting with ``prefix``, in path order, from the
        recursive listing of the directory holding the prefix."""
        directory = prefix if prefix.endswith("/") or prefix == "" else split_key(prefix)[0]
        url: str | None = self._files_url(directory.strip("/"))
        params: dict[str, Any] | None = {
            "recursive": "true",
            "limit": self.recursive_limit,
        }
        found: list[tuple[str, int]] = []
        while url:
            answer = self._api_get(url, params)
            if answer is None:
                break
            found += [
                (item["path"], int(item["size"]))
                for item in answer["results"]
                if item["path"].startswith(prefix)
            ]
            url, params = answer.get("next"), None
        return found

    async def list(self) -> AsyncIterator[str]:
        await self._ensure_open()
        for key, _ in await asyncio.to_thread(self._files_below, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        await self._ensure_open()
        for key, _ in await asyncio.to_thread(self._files_below, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        await self._ensure_open()
        path = prefix.strip("/")
        if self._writes is not None:
            names = await asyncio.to_thread(self._names_in_session, path)
        else:
            directory = await asyncio.to_thread(self._directory, path, refresh=True)
            if directory is None:
                return
            names = directory.directories | directory.files.keys()
        for name in sorted(names):
            yield name

    def _names_in_session(self, path: str) -> Iterable[str]:
        """The names in directory ``path``: the draft's with the session's changes over them."""
        assert self._writes is not None
        directory = self._directory(path, refresh=True) or DirectoryListing()
        below = f"{path}/" if path else ""
        return names_with_changes(
            directory, below, self._writes.changes(below), lambda p: not self._files_below(p)
        )
