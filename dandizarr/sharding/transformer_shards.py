"""The storage transformer's shard layout: a shard's bytes <-> its chunks. No I/O.

A shard is its chunks (written in Morton order of their position in the shard) followed by the
index: ``16 * prod(chunks_per_shard)`` bytes of little-endian ``(offset, nbytes)`` uint64
pairs in C order, ``2**64 - 1`` twice for an absent chunk (the ``dandizarr.sharding.index`` format
without a checksum).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from dandizarr.sharding.index import IndexCodecs, ShardFormatError, ShardIndex
from dandizarr.sharding.morton import morton_order_array
from dandizarr.sharding.transformer_keys import Coords

_INDEX_CODECS = IndexCodecs(crc32c=False)


class ShardLayout:
    """Encodes and decodes the shards of one ``chunks_per_shard`` shape."""

    def __init__(self, chunks_per_shard: Coords) -> None:
        self.chunks_per_shard = chunks_per_shard
        self._order = morton_order_array(chunks_per_shard)

    @property
    def index_nbytes(self) -> int:
        return 16 * math.prod(self.chunks_per_shard)

    def decode_index(self, data: bytes, data_end: int | None) -> ShardIndex:
        """The index in ``data`` (the index's bytes), checked against a shard whose chunk data
        ends at ``data_end`` (None: not known)."""
        index = ShardIndex.decode(data, self.chunks_per_shard, _INDEX_CODECS)
        index.validate(0, data_end)
        return index

    def decode(self, shard_key: str, data: bytes) -> dict[Coords, bytes]:
        """The chunks of a whole shard, by position in the shard."""
        if len(data) < self.index_nbytes:
            raise ShardFormatError(
                f"shard {shard_key} of {len(data)} bytes is shorter than its "
                f"{self.index_nbytes}-byte index"
            )
        data_end = len(data) - self.index_nbytes
        index = self.decode_index(data[data_end:], data_end)
        chunks = {}
        for within in present_positions(index):
            offset, nbytes = index.get(within) or (0, 0)
            chunks[within] = data[offset : offset + nbytes]
        return chunks

    def encode(self, chunks: Mapping[Coords, bytes]) -> bytes:
        """A shard of ``chunks`` (by position in the shard)."""
        index = ShardIndex.empty(self.chunks_per_shard)
        parts = []
        offset = 0
        for row in self._order:
            within = tuple(int(c) for c in row)
            value = chunks.get(within)
            if value is None:
                continue
            index.set(within, offset, len(value))
            parts.append(value)
            offset += len(value)
        parts.append(index.encode(_INDEX_CODECS))
        return b"".join(parts)


def present_positions(index: ShardIndex) -> list[Coords]:
    """Positions in the shard of the chunks the index has, in C order."""
    return [tuple(w) for w in np.argwhere(index.present()).tolist()]
