"""The shard index: an ``(offset, nbytes)`` uint64 pair per inner chunk, C order.

Shared by the ``sharding_indexed`` codec and the archives' shard objects (``archive_packing``),
whose index carries the codec's default chain (``IndexCodecs()``). Empty chunks are ``2**64 - 1``
in both fields. Everything here validates: a malformed index raises ``ShardFormatError`` rather
than letting a reader return wrong bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import crc32c as _crc32c
import numpy as np

from dandizarr.sharding.array_metadata import MAX_RANK
from dandizarr.sharding.codecs.base import codec_name_config
from dandizarr.sharding.metadata_values import MetadataError, check_codecs, metadata_int, shown

__all__ = [
    "MAX_UINT64",
    "IndexCodecs",
    "IndexCodecsLike",
    "ShardFormatError",
    "ShardIndex",
    "as_index_codecs",
    "nbytes_encoded",
]

MAX_UINT64 = 2**64 - 1
_EMPTY = np.uint64(MAX_UINT64)

# Codecs whose output size depends on the data: forbidden in index_codecs by the spec.
_VARIABLE_SIZE_CODECS = {"gzip", "zstd", "blosc", "lz4", "zlib", "bz2", "lzma", "vlen-bytes"}


class ShardFormatError(ValueError):
    """A shard (or its index) is malformed: truncated, corrupt or inconsistent."""


@dataclass(frozen=True, slots=True)
class IndexCodecs:
    """The fixed-size codec chain allowed for a shard index.

    ``transpose`` (optional, before ``bytes``) permutes the ``chunks_per_shard + (2,)`` index
    array; ``endian`` is the ``bytes`` codec; ``crc32c`` appends a 4-byte checksum.
    """

    endian: Literal["little", "big"] = "little"
    crc32c: bool = True
    transpose: tuple[int, ...] | None = None

    @classmethod
    def from_json(cls, codecs: Sequence[Mapping[str, Any] | str]) -> IndexCodecs:
        """The chain an ``index_codecs`` list declares; MetadataError when it is none the
        spec allows."""
        check_codecs(codecs, "index_codecs")
        endian: Literal["little", "big"] | None = None
        crc = False
        transpose: tuple[int, ...] | None = None
        for codec in codecs:
            name, config = codec_name_config(codec)
            if name in _VARIABLE_SIZE_CODECS:
                raise MetadataError(
                    f"index_codecs: {name!r} produces a variable-size encoding, which the "
                    "sharding_indexed spec forbids for the shard index"
                )
            if name == "transpose":
                if endian is not None or transpose is not None:
                    raise MetadataError("index_codecs: transpose must come once, before bytes")
                order = config.get("order")
                # The index array: the shard's dimensions and one more (offset, length).
                if not isinstance(order, list) or len(order) > MAX_RANK + 1:
                    raise MetadataError(f"index_codecs: transpose order {shown(order)}")
                rank = len(order)
                transpose = tuple(
                    metadata_int(i, "index_codecs: a transpose axis", 0, rank - 1) for i in order
                )
                if sorted(transpose) != list(range(rank)):
                    raise MetadataError(f"index_codecs: {transpose} is no permutation")
            elif name == "bytes":
                if endian is not None:
                    raise MetadataError("index_codecs: exactly one bytes codec allowed")
                value = config.get("endian", "little")
                if value not in ("little", "big"):
                    raise MetadataError(f"index_codecs: invalid endian {shown(value)}")
                endian = value
            elif name == "crc32c":
                if endian is None or crc:
                    raise MetadataError("index_codecs: crc32c must come once, after bytes")
                crc = True
            else:
                raise MetadataError(f"index_codecs: unsupported codec {shown(name)}")
        if endian is None:
            raise MetadataError("index_codecs: an array -> bytes codec ('bytes') is required")
        return cls(endian=endian, crc32c=crc, transpose=transpose)

    def to_json(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.transpose is not None:
            out.append({"name": "transpose", "configuration": {"order": list(self.transpose)}})
        out.append({"name": "bytes", "configuration": {"endian": self.endian}})
        if self.crc32c:
            out.append({"name": "crc32c"})
        return out

    def nbytes(self, chunks_per_shard: Sequence[int]) -> int:
        return nbytes_encoded(chunks_per_shard, self.crc32c)


def nbytes_encoded(chunks_per_shard: Sequence[int], crc32c: bool) -> int:
    """Size in bytes of an encoded index: 16 per inner chunk, plus 4 for a checksum (exact:
    Python's integers, where int64 would wrap for a shard of 2**64 inner chunks)."""
    return 16 * math.prod(int(n) for n in chunks_per_shard) + (4 if crc32c else 0)


IndexCodecsLike = IndexCodecs | Sequence[Mapping[str, Any] | str] | None


def as_index_codecs(codecs: IndexCodecsLike) -> IndexCodecs:
    """Index codecs from their JSON (None: the default, little-endian with crc32c)."""
    if codecs is None:
        return IndexCodecs()
    if isinstance(codecs, IndexCodecs):
        return codecs
    return IndexCodecs.from_json(codecs)


@dataclass(eq=False)
class ShardIndex:
    """``offsets_and_lengths``: uint64 array of shape ``chunks_per_shard + (2,)``."""

    offsets_and_lengths: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        array = self.offsets_and_lengths
        if array.dtype != np.uint64 or array.ndim < 1 or array.shape[-1] != 2:
            raise ValueError("offsets_and_lengths must be uint64 with a trailing axis of 2")

    @classmethod
    def empty(cls, chunks_per_shard: Sequence[int]) -> ShardIndex:
        shape = (*(int(n) for n in chunks_per_shard), 2)
        return cls(np.full(shape, _EMPTY, dtype=np.uint64))

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(self.offsets_and_lengths.shape[:-1])

    @property
    def offsets(self) -> np.ndarray:
        return self.offsets_and_lengths[..., 0]

    @property
    def lengths(self) -> np.ndarray:
        return self.offsets_and_lengths[..., 1]

    def present(self) -> np.ndarray:
        """Boolean mask (shape ``chunks_per_shard``) of inner chunks that are stored."""
        return self.offsets_and_lengths[..., 0] != _EMPTY

    def get(self, coords: Sequence[int]) -> tuple[int, int] | None:
        offset, nbytes = (int(v) for v in self.offsets_and_lengths[tuple(coords)])
        if offset == MAX_UINT64 and nbytes == MAX_UINT64:
            return None
        return offset, nbytes

    def set(self, coords: Sequence[int], offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset >= MAX_UINT64 or nbytes >= MAX_UINT64:
            raise ValueError(f"invalid chunk range offset={offset} nbytes={nbytes}")
        self.offsets_and_lengths[tuple(coords)] = (offset, nbytes)

    def clear(self, coords: Sequence[int]) -> None:
        self.offsets_and_lengths[tuple(coords)] = _EMPTY

    def is_empty(self) -> bool:
        return bool(np.all(self.offsets_and_lengths == _EMPTY))

    def copy(self) -> ShardIndex:
        return ShardIndex(self.offsets_and_lengths.copy())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardIndex):
            return NotImplemented
        return np.array_equal(self.offsets_and_lengths, other.offsets_and_lengths)

    def encode(self, codecs: IndexCodecsLike = None) -> bytes:
        spec = as_index_codecs(codecs)
        array = self.offsets_and_lengths
        if spec.transpose is not None:
            array = array.transpose(spec.transpose)
        dtype = "<u8" if spec.endian == "little" else ">u8"
        data = np.ascontiguousarray(array, dtype=dtype).tobytes()
        if spec.crc32c:
            data += _crc32c.crc32c(data).to_bytes(4, "little")
        return data

    @classmethod
    def decode(
        cls,
        data: bytes | memoryview,
        chunks_per_shard: Sequence[int],
        codecs: IndexCodecsLike = None,
    ) -> ShardIndex:
        """Parse an encoded index, checking its length, checksum and empty markers."""
        spec = as_index_codecs(codecs)
        cps = tuple(int(n) for n in chunks_per_shard)
        expected = nbytes_encoded(cps, spec.crc32c)
        if len(data) != expected:
            raise ShardFormatError(
                f"shard index is {len(data)} bytes, expected {expected} "
                f"for {cps} chunks per shard" + (" with crc32c" if spec.crc32c else "")
            )
        body = memoryview(data)[: expected - 4] if spec.crc32c else memoryview(data)
        if spec.crc32c:
            stored = int.from_bytes(bytes(data[expected - 4 :]), "little")
            actual = _crc32c.crc32c(body)
            if stored != actual:
                raise ShardFormatError(
                    f"shard index crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})"
                )
        dtype = "<u8" if spec.endian == "little" else ">u8"
        array = np.frombuffer(body, dtype=dtype)
        if spec.transpose is not None:
            encoded_shape = tuple((*cps, 2)[i] for i in spec.transpose)
            array = array.reshape(encoded_shape).transpose(np.argsort(spec.transpose))
        array = np.array(array.reshape((*cps, 2)), dtype=np.uint64)  # native, writable copy
        index = cls(array)
        index.check_markers()
        return index

    def check_markers(self) -> None:
        """Offset and nbytes must be both ``2**64 - 1`` (empty) or neither."""
        empty = self.offsets_and_lengths == _EMPTY
        half = empty[..., 0] != empty[..., 1]
        if np.any(half):
            where = tuple(int(i) for i in np.argwhere(half)[0])
            raise ShardFormatError(
                f"shard index entry {where}: exactly one of offset/nbytes is 2**64-1"
            )

    def validate(self, data_start: int = 0, data_end: int | None = None) -> None:
        """Check every stored range lies in ``[data_start, data_end)`` and none overlap.

        ``data_end`` None means unknown (a suffix read does not reveal the shard's size); the
        chunk read itself then catches a range past the end.
        """
        self.check_markers()
        present = self.present()
        starts = self.offsets[present]
        lengths = self.lengths[present]
        if starts.size == 0:
            return
        if np.any(starts < np.uint64(data_start)):
            raise ShardFormatError(f"inner chunk starts before byte {data_start} (inside index)")
        # Compare lengths against the room left, so the uint64 sum cannot overflow.
        limit = np.uint64(MAX_UINT64 if data_end is None else data_end)
        if np.any(starts > limit) or np.any(lengths > limit - starts):
            raise ShardFormatError(
                "inner chunk range past the end of the shard"
                + ("" if data_end is None else f" ({data_end} data bytes)")
            )
        ends = starts + lengths
        # Zero-length ranges sort first at equal offsets so they never count as overlapping.
        order = np.lexsort((lengths, starts))
        if np.any(ends[order][:-1] > starts[order][1:]):
            raise ShardFormatError("inner chunk byte ranges overlap")
