"""The records the parts of an upload pass around: its options, and a local file as hashed."""

from __future__ import annotations

from dataclasses import dataclass

# A batch's PUTs must finish before its URLs expire; bounding its bytes keeps that likely.
DEFAULT_MAX_BATCH_BYTES = 2 << 30
# Fresh URLs for one batch (expired URLs, files changed on disk) at most this many times.
MAX_BATCH_RESTARTS = 4


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class LocalFile:
    """A file of the local tree as it was hashed: its path in the archive, size and md5."""

    path: str
    size: int
    md5: str


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
    # Chunk files go into shard objects (docs/sharded.md); a new archive is created sharded.
    pack: bool = False
    # Uncompressed chunk bytes a shard aims at (None: sharding.archive_packing's default, 64 MiB).
    shard_target_bytes: int | None = None
