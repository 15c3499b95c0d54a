"""The records the parts of an upload pass around: its options, a local file as hashed, and
the listing of every local file (compact: no object per file)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dandizarr.client.api_connection import DEFAULT_WAIT_SECONDS
from dandizarr.client.errors import ClientError
from dandizarr.client.listing_columns import PathColumn, RecordColumn
from dandizarr.sharding.archive_packing import MAX_PLANNED_PATHS

# A batch's PUTs must finish before its URLs expire; bounding its bytes keeps that likely.
DEFAULT_MAX_BATCH_BYTES = 2 << 30
# How long an upload waits for the server's checksum once its last batch is completed.
DEFAULT_CHECKSUM_TIMEOUT = DEFAULT_WAIT_SECONDS
# Files one batch gathers (its URLs asked for while earlier PUTs run) before it is completed:
# enough that completing is rare, few enough that the service applies batches as they come
# instead of all at the end, and that a batch an interruption cancels costs little to redo.
DEFAULT_MAX_BATCH_FILES = 10_000


def hash_jobs(asked: int | None) -> int:
    """How many files are hashed at once: as asked, else a thread per CPU, at most 8."""
    return asked or min(8, os.cpu_count() or 1)


# Fresh URLs for one batch (expired URLs, files changed on disk) at most this many times.
MAX_BATCH_RESTARTS = 4


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class LocalFile:
    """A file of the local tree as it was hashed: its path in the archive, size and md5."""

    path: str
    size: int
    md5: str


class LocalListing:
    """The local files of an upload in path order, as columns (``listing_columns``): paths,
    and each file's size and md5, in temporary files; in memory, an end offset per path and
    whether each file is hashed yet: about 5 bytes a file. Sizes come from the listing until
    a file is hashed (``set_hashed``), then are the bytes hashed; a listing ``of_paths`` has
    none until then (``sized`` is False). ``close`` when done."""

    def __init__(self, files: Iterable[tuple[str, int]], *, sized: bool = True) -> None:
        self.paths = PathColumn()
        self.records = RecordColumn()
        self.sized = sized
        self._listed_bytes = 0
        self._hashed_bytes = 0  # of the files hashed, once each
        self._hashed_lock = threading.Lock()  # shards are built (and hashed) by several threads
        for path, size in files:
            if len(self.paths) == MAX_PLANNED_PATHS:
                self.close()
                raise ClientError(f"an upload takes at most {MAX_PLANNED_PATHS:,} files")
            self.paths.append(path)
            self.records.append(max(size, 0))
            self._listed_bytes += max(size, 0)
        self.paths.seal()
        self.records.seal()
        self.hashed = bytearray(len(self.paths))  # 1 once ``set_hashed``

    @classmethod
    def of_paths(cls, paths: Iterable[str]) -> LocalListing:
        """A listing of ``paths`` whose sizes are known only as each file is hashed (see
        ``dandizarr.checksums.local.iter_local_paths``)."""
        return cls(((path, 0) for path in paths), sized=False)

    @property
    def total_bytes(self) -> int | None:
        """The bytes of every file as listed; of a listing ``of_paths``, None until every file
        is hashed."""
        if self.sized:
            return self._listed_bytes
        return None if 0 in self.hashed else self._hashed_bytes

    @property
    def known_bytes(self) -> int:
        """The bytes of every file as listed; of a listing ``of_paths``, of those hashed."""
        return self._listed_bytes if self.sized else self._hashed_bytes

    def __len__(self) -> int:
        return len(self.paths)

    def close(self) -> None:
        self.paths.close()
        self.records.close()

    def set_hashed(self, i: int, size: int, md5: str) -> None:
        self.records.write(i, size, bytes.fromhex(md5))
        if not self.hashed[i]:
            self.hashed[i] = 1
            with self._hashed_lock:
                self._hashed_bytes += size

    def set_hashed_many(self, hashed: Iterable[tuple[int, int, str]]) -> None:
        """``set_hashed`` of (position, size, md5) each: one write per run of positions."""
        records = []
        new_bytes = 0
        for i, size, md5 in hashed:
            if not self.hashed[i]:
                new_bytes += size
            self.hashed[i] = 1
            records.append((i, size, bytes.fromhex(md5)))
        self.records.write_many(records)
        with self._hashed_lock:
            self._hashed_bytes += new_bytes

    def is_hashed(self, i: int) -> bool:
        return bool(self.hashed[i])

    def record(self, i: int) -> tuple[int, bytes]:
        """The size and md5 digest of file ``i`` (as listed, or as hashed once it is)."""
        return self.records.read(i)

    def size(self, i: int) -> int:
        return self.record(i)[0]

    def digest(self, i: int) -> bytes:
        return self.record(i)[1]

    def md5(self, i: int) -> str:
        return self.record(i)[1].hex()

    def file(self, i: int) -> LocalFile:
        size, digest = self.record(i)
        return LocalFile(self.paths[i], size, digest.hex())

    def entries(self) -> Iterator[tuple[str, int, str]]:
        """(path, size, md5) of every file, in path order (once all are hashed)."""
        for path, (size, digest) in zip(self.paths, self.records, strict=True):
            yield path, size, digest.hex()


@dataclass(frozen=True)
class UploadOptions:
    dandiset: str | None = None
    name: str | None = None
    zarr_id: str | None = None
    sync: bool = False
    cancel_open_batch: bool = False
    hash_jobs: int | None = None
    checksum_timeout: float = DEFAULT_CHECKSUM_TIMEOUT
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_batch_files: int = DEFAULT_MAX_BATCH_FILES
    # Chunk files go into shard objects (docs/sharded.md); a new archive is created sharded.
    pack: bool = False
    # Uncompressed chunk bytes a shard aims at (None: dandizarr.sharding.archive_packing's default,
    # 64 MiB).
    shard_target_bytes: int | None = None
