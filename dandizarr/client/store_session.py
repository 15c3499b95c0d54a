"""What ``ArchiveStore`` does as a writer (docs/writing.md): zarr's writing calls, staged in
the store's write session (``dandizarr.client.store_writes``), and the session's end."""

from __future__ import annotations

import asyncio
from abc import abstractmethod

from zarr.abc.store import Store
from zarr.core.buffer import Buffer

from dandizarr.client.store_reads import FileEntry
from dandizarr.client.store_streams import Source
from dandizarr.client.store_writes import SessionWrites


class WritableStore(Store):
    """A zarr store writing into a write session (``_writes``), or read-only (None)."""

    _writes: SessionWrites | None

    @abstractmethod
    def invalidate(self) -> None:
        """Forget what the store cached of the archive."""

    @abstractmethod
    def _entry(self, key: str, *, with_url: bool) -> FileEntry | None:
        """The draft's entry of ``key``."""

    @property
    def supports_writes(self) -> bool:
        return self._writes is not None and not self.read_only

    @property
    def supports_deletes(self) -> bool:
        return self.supports_writes

    @property
    def session_id(self) -> str | None:
        """The write session this store writes into (None: read-only)."""
        return self._writes.session_id if self._writes is not None else None

    def _file_entry(self, key: str) -> FileEntry | None:
        """The key's entry as this store reads it: the session's change, else the draft's."""
        if self._writes is not None:
            changed, staged = self._writes.lookup(key, with_url=False)
            if changed:
                return staged
        return self._entry(key, with_url=False)

    # --- writing: into the session ----------------------------------------------------------

    def _session(self) -> SessionWrites:
        self._check_writable()
        if self._writes is None:
            raise ValueError("ArchiveStore is read-only: open it with read_only=False")
        return self._writes

    async def set(self, key: str, value: Buffer) -> None:
        await self._ensure_open()
        writes = self._session()
        await asyncio.to_thread(writes.write, key, value.to_bytes())

    def put_stream(self, key: str, source: Source, size: int) -> str:
        """Write ``size`` bytes read from ``source`` (a binary file-like object, or an
        iterable of byte chunks) at ``key`` of the session, streamed to storage in parts past
        the service's multipart threshold (bounded memory, no local disk); their md5. Visible
        with the rest of the session at its commit."""
        return self._session().put_stream(key, source, size)

    async def delete(self, key: str) -> None:
        await self._ensure_open()
        writes = self._session()
        await asyncio.to_thread(writes.delete, [key])

    async def delete_dir(self, prefix: str) -> None:
        await self._ensure_open()
        writes = self._session()
        if prefix != "" and not prefix.endswith("/"):
            prefix += "/"
        keys = [key async for key in self.list_prefix(prefix)]
        await asyncio.to_thread(writes.delete, keys)

    def flush(self) -> None:
        """Wait until every write of this store is in storage (the store that began the
        session writes behind: its ``set`` returns once the bytes are queued). ``commit()``
        flushes; a process committing a session that another store wrote into flushes that
        store first."""
        self._session().flush()

    def commit(self) -> str:
        """Make every write and delete of the session visible at once; the archive's new
        checksum. ``Conflict`` (code ``session_conflict``) when the draft changed meanwhile at
        a path the session changed: nothing is committed."""
        checksum = self._session().commit()
        self.invalidate()
        return checksum

    def abort(self) -> None:
        """Discard the session: nothing of it reaches the archive."""
        self._session().abort()
