"""What the pack path hands between its parts: a shard built locally and a pack batch of them.

Apart from ``shards`` (which plans and builds them with numpy), so a loose upload never loads
numpy and the sharding formats: they cost a quarter of a second of the CLI's start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from dandizarr.sharding.archive_packing import MemberRecord


@dataclass
class PreparedShard:
    """A shard built locally: in memory (``data``) or in a temporary file (``file``)."""

    name: str
    size: int
    md5: str
    members: tuple[MemberRecord, ...]  # the member files, as hashed
    data: bytes | None = None
    file: Path | None = None
    chunks_per_shard: tuple[int, ...] | None = None  # the shape of the shard's index

    @property
    def member_bytes(self) -> int:
        return sum(m.length for m in self.members)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.file is not None
        return self.file.read_bytes()

    def write(self, data: bytes) -> None:
        """Replace the shard's bytes (tests use it to corrupt a member); md5 and size follow."""
        if self.file is not None and self.data is None:
            self.file.write_bytes(data)
        else:
            self.data = bytes(data)
        self.size = len(data)
        self.md5 = hashlib.md5(data).hexdigest()

    def body(self) -> bytes | BinaryIO:
        if self.data is not None:
            return self.data
        assert self.file is not None
        return self.file.open("rb")

    def discard(self) -> None:
        self.data = None
        if self.file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()

    def declaration(self) -> bytearray:
        """The shard as a pack batch declares it (docs/sharded.md), as JSON, encoded member by
        member (no dict per member)."""
        declared: dict[str, Any] = {"name": self.name, "etag": self.md5, "size": self.size}
        if self.chunks_per_shard is not None:
            declared["chunks_per_shard"] = list(self.chunks_per_shard)
        out = bytearray(json.dumps(declared, separators=(",", ":"))[:-1].encode())
        out += b',"members":['
        for k, m in enumerate(self.members):
            if k:
                out += b","
            member = {
                "path": m.path,
                "md5": m.md5,
                "size": m.length,
                "offset": m.offset,
                "slot": m.slot,
            }
            out += json.dumps(member, separators=(",", ":")).encode()
        out += b"]}"
        return out


@dataclass
class PackBatch:
    """Shards to send in one pack batch, built by the producer thread."""

    shards: list[PreparedShard]

    @property
    def member_count(self) -> int:
        return sum(len(s.members) for s in self.shards)

    def discard(self) -> None:
        for shard in self.shards:
            shard.discard()
