"""How ``ArchiveStore`` reads an archive: what it caches of a file (``FileEntry``) and of a
directory (``DirectoryListing``), and the reads from storage of a file, or of a file packed in
a shard, whole or a byte range of it, each checked against what the service recorded. The
reads go through the client's storage session under its retry policy
(``ApiConnection.storage_request``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from dandizarr.client.api_connection import ApiConnection
from dandizarr.client.errors import ClientError
from dandizarr.client.retry import final_status_message


@dataclass
class FileEntry:
    """What the store knows about one file: from a listing (no URL yet) or its file entry."""

    size: int
    digest: str
    url: str | None = None
    # For a packed file: where its bytes start in the shard object ``url`` points at.
    shard_offset: int | None = None


@dataclass
class DirectoryListing:
    """One directory's listing: its files and the names of its subdirectories."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    directories: set[str] = field(default_factory=set)


def split_key(key: str) -> tuple[str, str]:
    """``("a/b", "c")`` for ``"a/b/c"``; ``("", "c")`` for ``"c"``."""
    directory, _, name = key.rpartition("/")
    return directory, name


def range_header(byte_range: ByteRequest | None, size: int) -> tuple[str | None, slice]:
    """The ``Range`` header for ``byte_range`` of a ``size``-byte file (None: the whole file),
    and the slice of the whole file it stands for (to cut a 200 answer to size)."""
    if byte_range is None:
        return None, slice(None)
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0 or byte_range.end < byte_range.start:
            raise ValueError(f"invalid byte range {byte_range}")
        return f"bytes={byte_range.start}-{byte_range.end - 1}", slice(
            byte_range.start, byte_range.end
        )
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"invalid byte range {byte_range}")
        return f"bytes={byte_range.offset}-", slice(byte_range.offset, None)
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"invalid byte range {byte_range}")
        return f"bytes=-{byte_range.suffix}", slice(max(0, size - byte_range.suffix), None)
    raise TypeError(f"unexpected byte range {byte_range!r}")


class StaleEntry(Exception):
    """The cached entry no longer matches storage (expired URL, changed or vanished file)."""


@dataclass
class StorageReads:
    """Reads from storage for one archive's store; each raises StaleEntry when storage does not
    match the entry (expired URL, changed or vanished file). ``count`` is called for each
    storage read (its retries, the client's retry counter counts)."""

    client: ApiConnection
    zarr_id: str
    count: Callable[[], None]

    def file(self, entry: FileEntry, byte_range: ByteRequest | None) -> bytes:
        """A file's bytes (or part of them) from its download URL."""
        if entry.shard_offset is not None:
            return self.member(entry, byte_range)
        header, wanted = range_header(byte_range, entry.size)
        start, stop, _ = wanted.indices(entry.size)
        if stop <= start:  # nothing to fetch (an empty file, or a range past its end)
            return b""
        assert entry.url is not None
        self.count()
        response = self.client.storage_request(
            "GET", entry.url, headers={"Range": header} if header else None
        )
        if response.status_code in (403, 404):
            raise StaleEntry()
        if response.status_code == 416:
            raise StaleEntry()  # we believed the range to be inside the file
        if response.status_code == 206:
            data = response.content
            if len(data) != stop - start:
                raise StaleEntry()
            return data
        if response.status_code == 200:
            data = response.content
            if len(data) != entry.size:
                raise StaleEntry()
            if header is None and hashlib.md5(data).hexdigest() != entry.digest:
                raise StaleEntry()
            return data[wanted]
        raise self._refused(response, "a file")

    def _refused(self, response: requests.Response, what: str) -> ClientError:
        """The error of a final answer from storage (400, 507, ...), as storage gave it."""
        said = final_status_message(response.status_code, response.text.strip()[:200])
        return ClientError(f"reading {what} of archive {self.zarr_id} from storage: {said}")

    def member(self, entry: FileEntry, byte_range: ByteRequest | None) -> bytes:
        """A packed file's bytes (or part of them): one range request on its shard."""
        assert entry.url is not None and entry.shard_offset is not None
        start, stop, _ = range_header(byte_range, entry.size)[1].indices(entry.size)
        if stop <= start:
            return b""
        first, last = entry.shard_offset + start, entry.shard_offset + stop - 1
        self.count()
        response = self.client.storage_request(
            "GET", entry.url, headers={"Range": f"bytes={first}-{last}"}
        )
        if response.status_code in (403, 404, 416):
            raise StaleEntry()
        if response.status_code == 206:
            data = response.content
        elif response.status_code == 200:  # storage ignored the range: the whole shard
            data = response.content[first : last + 1]
        else:
            raise self._refused(response, "a shard")
        if len(data) != stop - start:
            raise StaleEntry()
        if byte_range is None and hashlib.md5(data).hexdigest() != entry.digest:
            raise StaleEntry()
        return data
