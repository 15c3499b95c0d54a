"""The ``crc32c`` codec: a 4-byte checksum after the bytes, checked on decode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import crc32c as _crc32c

from dandizarr.sharding.codecs.base import BytesBytesCodec
from dandizarr.sharding.index import ShardFormatError

__all__ = ["Crc32cCodec"]


@dataclass(frozen=True)
class Crc32cCodec(BytesBytesCodec):
    name: ClassVar[str] = "crc32c"
    fixed_size_delta: ClassVar[int | None] = 4

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name}

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(data) + _crc32c.crc32c(data).to_bytes(4, "little")

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> memoryview:
        view = memoryview(data)
        if len(view) < 4:
            raise ShardFormatError("crc32c: input shorter than the 4-byte checksum")
        body = view[:-4]
        stored = int.from_bytes(view[-4:], "little")
        if _crc32c.crc32c(body) != stored:
            raise ShardFormatError("crc32c: checksum mismatch")
        return body
