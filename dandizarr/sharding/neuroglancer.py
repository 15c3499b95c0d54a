"""Neuroglancer's precomputed sharded format (``neuroglancer_uint64_sharded_v1``).

A sharded precomputed scale maps uint64 chunk ids to byte strings. Each id is hashed to a shard
(one ``<hex>.shard`` object) and a minishard inside it. A shard file starts with the shard index
(``2**minishard_bits`` entries of ``[start, end)``, relative to the end of the index); each
minishard index lists ``(id, offset, size)`` for its chunks, all three delta encoded.

Reading one chunk costs three range reads (index entry, minishard index, data), or one once the
minishard index is cached: the data read is conditioned on the cached shard version, so a
rewritten shard is noticed by the same request.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import mmh3
import numpy as np

from dandizarr.sharding.morton import morton_code
from dandizarr.sharding.store import KeyValueStore

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES = ("identity", "murmurhash3_x86_128")
ENCODINGS = ("raw", "gzip")
UINT64_MAX = (1 << 64) - 1

HashName = Literal["identity", "murmurhash3_x86_128"]
Encoding = Literal["raw", "gzip"]


class ShardingError(ValueError):
    """Invalid sharding metadata or a corrupt shard (truncated index, range past the end...)."""


def _require_int(config: Mapping[str, Any], name: str, low: int, high: int) -> int:
    value = config.get(name)
    # bool is an int subclass; reject it so `true` in JSON is not taken as 1.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ShardingError(
            f"sharding {name!r} must be an integer in [{low}, {high}], got {value!r}"
        )
    return value


def _validated_fields(config: Any) -> tuple[Any, ...]:
    """The ShardingSpec fields of JSON sharding metadata, in field order, validated."""
    if not isinstance(config, Mapping):
        raise ShardingError(f"sharding metadata must be a JSON object, got {config!r}")
    if config.get("@type") != SHARDING_TYPE:
        raise ShardingError(
            f"sharding '@type' must be {SHARDING_TYPE!r}, got {config.get('@type')!r}"
        )
    preshift = _require_int(config, "preshift_bits", 0, 64)
    minishard = _require_int(config, "minishard_bits", 0, 32)
    shard = _require_int(config, "shard_bits", 0, 64)
    if minishard + shard > 64:
        raise ShardingError("minishard_bits + shard_bits must be at most 64")
    hash_name = config.get("hash")
    if hash_name not in HASHES:
        raise ShardingError(f"sharding 'hash' must be one of {HASHES}, got {hash_name!r}")
    encodings = []
    for name in ("minishard_index_encoding", "data_encoding"):
        value = config.get(name, "raw")
        if value not in ENCODINGS:
            raise ShardingError(f"sharding {name!r} must be one of {ENCODINGS}, got {value!r}")
        encodings.append(value)
    return (preshift, minishard, shard, hash_name, *encodings)


@dataclass(frozen=True, slots=True)
class ChunkLocation:
    shard: int
    minishard: int


@dataclass(frozen=True, slots=True)
class ShardingSpec:
    """The sharding parameters embedded in a precomputed ``info`` scale."""

    preshift_bits: int
    minishard_bits: int
    shard_bits: int
    hash: HashName = "identity"
    minishard_index_encoding: Encoding = "raw"
    data_encoding: Encoding = "raw"

    def __post_init__(self) -> None:
        _validated_fields(self.to_json())

    @classmethod
    def from_json(cls, config: Any) -> ShardingSpec:
        return cls(*_validated_fields(config))

    def to_json(self) -> dict[str, Any]:
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def shard_index_size(self) -> int:
        return 16 << self.minishard_bits

    def hash_id(self, chunk_id: int) -> int:
        shifted = (chunk_id & UINT64_MAX) >> self.preshift_bits
        if self.hash == "identity":
            return shifted
        return murmurhash3_x86_128_low64(shifted)

    def locate(self, chunk_id: int) -> ChunkLocation:
        hashed = self.hash_id(chunk_id)
        return ChunkLocation(
            shard=(hashed >> self.minishard_bits) & ((1 << self.shard_bits) - 1),
            minishard=hashed & ((1 << self.minishard_bits) - 1),
        )

    def shard_name(self, shard: int) -> str:
        """``<shard>.shard``: lowercase hex zero padded to ceil(shard_bits / 4) digits."""
        digits = -(-self.shard_bits // 4)
        return f"{shard:0{digits}x}.shard"


def murmurhash3_x86_128_low64(value: int) -> int:
    """The low 64 bits of MurmurHash3_x86_128 (seed 0) of ``value`` as 8 little-endian bytes."""
    digest = mmh3.hash128(struct.pack("<Q", value), seed=0, x64arch=False, signed=False)
    return int(digest) & UINT64_MAX


def compressed_morton_code(position: Sequence[int], grid_shape: Sequence[int]) -> int:
    """The compressed Morton code of a chunk position (``dandizarr.sharding.morton``), checked to
    lie in
    the grid: a chunk id outside it would name another chunk."""
    if len(position) != len(grid_shape):
        raise ValueError(f"position {tuple(position)} does not match grid {tuple(grid_shape)}")
    for p, g in zip(position, grid_shape, strict=True):
        if not 0 <= p < g:
            raise ValueError(f"position {tuple(position)} is outside grid {tuple(grid_shape)}")
    return morton_code(position, grid_shape)


def encode_payload(data: bytes, encoding: str) -> bytes:
    """Chunk data or a minishard index as stored under ``encoding`` (raw or gzip)."""
    # mtime=0 keeps shard files reproducible.
    return gzip.compress(data, mtime=0) if encoding == "gzip" else data


def decode_payload(data: bytes, encoding: str, what: str) -> bytes:
    """Inverse of ``encode_payload``; ShardingError naming ``what`` on corrupt gzip."""
    if encoding != "gzip":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:
        raise ShardingError(f"corrupt gzip {what}: {error}") from error


@dataclass(frozen=True, slots=True)
class MinishardEntry:
    chunk_id: int
    start: int  # absolute byte offset in the shard file
    end: int


def encode_minishard_index(entries: Sequence[MinishardEntry], shard_index_size: int) -> bytes:
    """The raw (unencoded) minishard index of entries sorted by chunk id."""
    ids = np.array([e.chunk_id for e in entries], dtype=np.uint64)
    starts = np.array([e.start - shard_index_size for e in entries], dtype=np.uint64)
    sizes = np.array([e.end - e.start for e in entries], dtype=np.uint64)
    table = np.zeros((3, len(entries)), dtype="<u8")
    if len(entries):
        table[0] = np.diff(ids, prepend=np.uint64(0))
        ends = starts + sizes
        table[1] = starts - np.concatenate([[np.uint64(0)], ends[:-1]]).astype(np.uint64)
        table[2] = sizes
    return table.tobytes()


def decode_minishard_index(
    data: bytes, shard_index_size: int, shard_size: int | None = None
) -> list[MinishardEntry]:
    """Parse a decoded minishard index; ``shard_size`` (when known) bounds the data ranges."""
    if len(data) % 24:
        raise ShardingError(f"minishard index of {len(data)} bytes is not a multiple of 24")
    n = len(data) // 24
    table = np.frombuffer(data, dtype="<u8").reshape(3, n)
    # Python ints: the cumulative sums of corrupt input may exceed 64 bits, which numpy would wrap.
    entries = []
    chunk_id = 0
    position = shard_index_size
    for delta_id, delta_start, size in zip(*(table[i].tolist() for i in range(3)), strict=True):
        chunk_id += delta_id
        start = position + delta_start
        end = start + size
        if chunk_id > UINT64_MAX:
            raise ShardingError("minishard index chunk ids overflow 64 bits")
        if shard_size is not None and end > shard_size:
            raise ShardingError(
                f"chunk {chunk_id} range [{start}, {end}) is past the end of the shard "
                f"({shard_size} bytes)"
            )
        entries.append(MinishardEntry(chunk_id, start, end))
        position = end
    return entries


def encode_shard(spec: ShardingSpec, chunks: Mapping[int, bytes]) -> bytes:
    """One shard file holding ``chunks`` (chunk id -> unencoded data), all of the same shard.

    Within each minishard the chunks are stored in id order, followed by that minishard's index;
    the minishards follow each other in minishard order.
    """
    if not chunks:
        raise ValueError("a shard needs at least one chunk")
    by_minishard: dict[int, list[int]] = {}
    shards = set()
    for chunk_id in chunks:
        if not 0 <= chunk_id <= UINT64_MAX:
            raise ValueError(f"chunk id {chunk_id} is not a uint64")
        location = spec.locate(chunk_id)
        shards.add(location.shard)
        by_minishard.setdefault(location.minishard, []).append(chunk_id)
    if len(shards) > 1:
        raise ValueError(f"chunks belong to several shards: {sorted(shards)}")
    index_size = spec.shard_index_size
    shard_index = np.zeros((spec.num_minishards, 2), dtype="<u8")
    parts: list[bytes] = []
    offset = index_size
    for minishard in sorted(by_minishard):
        entries = []
        for chunk_id in sorted(by_minishard[minishard]):
            data = encode_payload(bytes(chunks[chunk_id]), spec.data_encoding)
            entries.append(MinishardEntry(chunk_id, offset, offset + len(data)))
            parts.append(data)
            offset += len(data)
        index = encode_payload(
            encode_minishard_index(entries, index_size), spec.minishard_index_encoding
        )
        shard_index[minishard] = (offset - index_size, offset - index_size + len(index))
        parts.append(index)
        offset += len(index)
    return shard_index.tobytes() + b"".join(parts)


def decode_shard(spec: ShardingSpec, data: bytes) -> dict[int, bytes]:
    """Every chunk of a whole shard file: chunk id -> decoded data."""
    index_size = spec.shard_index_size
    if len(data) < index_size:
        raise ShardingError(
            f"shard of {len(data)} bytes is shorter than its {index_size}-byte index"
        )
    shard_index = np.frombuffer(data, dtype="<u8", count=2 * spec.num_minishards).reshape(-1, 2)
    chunks: dict[int, bytes] = {}
    for start, end in shard_index.tolist():
        start, end = check_minishard_range(start, end, index_size, len(data))
        if start == end:
            continue
        index = decode_payload(data[start:end], spec.minishard_index_encoding, "minishard index")
        for entry in decode_minishard_index(index, index_size, len(data)):
            chunks[entry.chunk_id] = decode_payload(
                data[entry.start : entry.end], spec.data_encoding, "chunk data"
            )
    return chunks


def check_minishard_range(
    start: int, end: int, index_size: int, shard_size: int | None
) -> tuple[int, int]:
    """Absolute ``[start, end)`` of a minishard index from its shard-index entry (relative to
    the end of the shard index); ShardingError when it is reversed or past the shard."""
    if end < start:
        raise ShardingError(f"minishard index range [{start}, {end}) is reversed")
    absolute = (index_size + start, index_size + end)
    if shard_size is not None and absolute[1] > shard_size:
        raise ShardingError(
            f"minishard index range {list(absolute)} is past the end of the shard "
            f"({shard_size} bytes)"
        )
    return absolute


def iter_shards(spec: ShardingSpec, chunk_ids: Iterable[int]) -> dict[int, list[int]]:
    """Group chunk ids by shard number."""
    groups: dict[int, list[int]] = {}
    for chunk_id in chunk_ids:
        groups.setdefault(spec.locate(chunk_id).shard, []).append(chunk_id)
    return groups


def write_shards(
    store: KeyValueStore, spec: ShardingSpec, chunks: Mapping[int, bytes], prefix: str = ""
) -> list[str]:
    """Write ``chunks`` as whole shard files under ``prefix`` (replacing those shards);
    returns the keys written."""
    keys = []
    for shard, ids in sorted(iter_shards(spec, chunks).items()):
        key = prefix + spec.shard_name(shard)
        store.set(key, encode_shard(spec, {i: chunks[i] for i in ids}))
        keys.append(key)
    return keys
