"""The records the parts of an upload pass around: its options, a local file as hashed, and
the listing of every local file (compact: no object per file)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dandizarr.client.errors import ClientError
from dandizarr.client.listing_columns import PathColumn, RecordColumn
from dandizarr.sharding.archive_packing import MAX_PLANNED_PATHS

# A batch's PUTs must finish before its URLs expire; bounding its bytes keeps that likely.
DEFAULT_MAX_BATCH_BYTES = 2 << 30
# Files one batch gathers (its URLs asked for while earlier PUTs run) before it is completed:
# enough that completing is rare, few enough that the service applies batches as they come
# instead of all at the end, and that a batch an interruption cancels costs little to redo.
DEFAULT_MAX_BATCH_FILES = 10_000
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
    a file is hashed (``set_hashed``), then are the bytes hashed. ``close`` when done."""

    def __init__(self, files: Iterable[tuple[str, int]]) -> None:
        self.paths = PathColumn()
        self.records = RecordColumn()
        self.total_bytes = 0
        for path, size in files:
            if len(self.paths) == MAX_PLANNED_PATHS:
                self.close()
                raise ClientError(f"an upload takes at most {MAX_PLANNED_PATHS:,} files")
            self.paths.append(path)
            self.records.append(size)
            self.total_bytes += size
        self.paths.seal()
        self.records.seal()
        self.hashed = bytearray(len(self.paths))  # 1 once ``set_hashed``

    def __len__(self) -> int:
        return len(self.paths)

    def close(self) -> None:
        self.paths.close()
        self.records.close()

    def set_hashed(self, i: int, size: int, md5: str) -> None:
        self.records.write(i, size, bytes.fromhex(md5))
        self.hashed[i] = 1

    def set_hashed_many(self, hashed: Iterable[tuple[int, int, str]]) -> None:
        """``set_hashed`` of (position, size, md5) each: one write per run of positions."""
        records = []
        for i, size, md5 in hashed:
            self.hashed[i] = 1
            records.append((i, size, bytes.fromhex(md5)))
        self.records.write_many(records)

    def is_hashed(self, i: int) -> bool:
        return bool(self.hashed[i])

    def record(self, i: int) -> tuple[int, bytes]:
        """The size and md5 digest of file ``i`` (as listed, or as hashed once it is)."""
        return self.records.read(i)

    def size(self, i: int) -> int:
        return self.record(i)[0]

    def total_size(self, positions: Iterable[int]) -> int:
        return self.records.total_size(positions)

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
    checksum_timeout: float = 600.0
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_batch_files: int = DEFAULT_MAX_BATCH_FILES
    # Chunk files go into shard objects (docs/sharded.md); a new archive is created sharded.
    pack: bool = False
    # Uncompressed chunk bytes a shard aims at (None: dandizarr.sharding.archive_packing's default,
    # 64 MiB).
    shard_target_bytes: int | None = None
