"""What the service returns, as small typed records (unknown fields are ignored)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Self


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class ServiceInfo:
    version: str
    batch_limit: int
    presigned_url_expiry_seconds: int
    storage: str
    # Most members one pack batch may declare (docs/sharded.md); None from older services.
    pack_member_limit: int | None = None
    # Files one batch may gather through POST upload/add/; None: an older service without it.
    open_batch_file_limit: int | None = None
    # Files bigger than this are sent in parts of at least ``multipart_part_bytes``
    # (docs/api.md, "Big files"); None: any file in one PUT (or an older service).
    multipart_threshold_bytes: int | None = None
    multipart_part_bytes: int | None = None
    # What one batch's files sent in parts may declare (bytes, parts); None: an older service.
    batch_declared_bytes_limit: int | None = None
    batch_declared_parts_limit: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Archive:
    zarr_id: str
    name: str
    dandiset: str
    checksum: str | None = None
    checksum_status: str = "complete"
    file_count: int = 0
    size: int = 0
    upload_in_progress: bool = False
    frozen: bool = False
    s3_url: str | None = None
    layout: str = "loose"  # or "sharded" (docs/sharded.md)
    shard_count: int = 0
    packing: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(**_known(cls, data))


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class RemoteFile:
    """One file of an archive's tree: its path, size and md5 (hex), and where its bytes are
    when the service said (a file's entry, or a listing with ``urls``)."""

    path: str
    size: int
    digest: str
    download_url: str | None = None
    # A packed file (docs/sharded.md): where its bytes start in the shard ``download_url`` is.
    shard_offset: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        shard = data.get("shard")
        return cls(
            path=data["path"],
            size=int(data["size"]),
            digest=data["digest"],
            download_url=data.get("download_url"),
            shard_offset=int(shard["offset"]) if isinstance(shard, dict) else None,
        )

    def range_header(self) -> str | None:
        """The ``Range`` of a packed file's bytes in its shard (None: the whole object).
        Never asked of an empty packed file, which has no bytes to ask for."""
        if self.shard_offset is None:
            return None
        if self.size <= 0:
            raise ValueError(f"{self.path}: an empty packed file has no byte range")
        return f"bytes={self.shard_offset}-{self.shard_offset + self.size - 1}"


@dataclass(frozen=True)
class DirectoryEntry:
    type: str  # "file" or "directory"
    name: str
    path: str
    size: int
    digest: str | None
