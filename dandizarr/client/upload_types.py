"""The records the parts of an upload pass around: its options, a local file as hashed, and
the listing of every local file (compact: no object per file)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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
    """The local files of an upload in path order, as columns: paths (str), sizes, md5 digests
    (16 bytes each, in one bytearray) and whether each is hashed yet; about 25 bytes a file
    beside its path. Sizes come from the listing until a file is hashed (``set_hashed``), then
    are the bytes hashed."""

    def __init__(self, files: Iterable[tuple[str, int]]) -> None:
        self.paths: list[str] = []
        self.sizes = array("q")
        for path, size in files:
            self.paths.append(path)
            self.sizes.append(size)
        self.digests = bytearray(16 * len(self.paths))
        self.hashed = bytearray(len(self.paths))  # 1 once ``set_hashed``

    def __len__(self) -> int:
        return len(self.paths)

    def set_hashed(self, i: int, size: int, md5: str) -> None:
        self.sizes[i] = size
        self.digests[16 * i : 16 * i + 16] = bytes.fromhex(md5)
        self.hashed[i] = 1

    def is_hashed(self, i: int) -> bool:
        return bool(self.hashed[i])

    def digest(self, i: int) -> bytes:
        return bytes(self.digests[16 * i : 16 * i + 16])

    def md5(self, i: int) -> str:
        return self.digests[16 * i : 16 * i + 16].hex()

    def file(self, i: int) -> LocalFile:
        return LocalFile(self.paths[i], self.sizes[i], self.md5(i))

    def entries(self) -> Iterator[tuple[str, int, str]]:
        """(path, size, md5) of every file, in path order (once all are hashed)."""
        for i, path in enumerate(self.paths):
            yield path, self.sizes[i], self.md5(i)


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
