"""The ``sharding_indexed`` codec over whole shards held in memory.

Geometry (inner chunks per shard, regions), the shard's index, encoding a shard array into one
value (inner chunks in write order, then or before the index) and decoding any region of it,
and the byte-level merge a partial write makes. Reads and writes through a store are
``dandizarr.sharding.indexed.codec.ShardingCodec``; building one from JSON is
``dandizarr.sharding.codec_registry``.

Write-strategy knobs (``write_order``, ``coalesce_gap``) are runtime settings: the spec keeps
them out of the metadata, so ``to_json`` never includes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from dandizarr.sharding.codecs.base import ArrayBytesCodec, ArraySpec, is_fill
from dandizarr.sharding.codecs.pipeline import CodecPipeline
from dandizarr.sharding.index import IndexCodecs, ShardFormatError, ShardIndex
from dandizarr.sharding.metadata_values import MetadataError, shown
from dandizarr.sharding.morton import morton_order_array, morton_rank
from dandizarr.sharding.parallel import parallel_map
from dandizarr.sharding.regions import ChunkPart, Region, chunk_parts

__all__ = ["Coords", "InMemoryShardingCodec", "WriteMode"]

Coords = tuple[int, ...]
WriteMode = Literal["rewrite", "append"]


@dataclass(frozen=True, eq=False)
class InMemoryShardingCodec(ArrayBytesCodec):
    """``sharding_indexed`` resolved for one shard spec (shape, dtype, fill value)."""

    name: ClassVar[str] = "sharding_indexed"

    shard_spec: ArraySpec
    chunk_shape: tuple[int, ...]
    inner: CodecPipeline
    index_codecs: IndexCodecs = field(default_factory=IndexCodecs)
    index_location: Literal["start", "end"] = "end"
    # Runtime write strategy, not metadata.
    write_order: Literal["morton", "C"] = "morton"
    coalesce_gap: int = 1 << 16

    def __post_init__(self) -> None:
        shard_shape = self.shard_spec.shape
        if len(self.chunk_shape) != len(shard_shape):
            raise MetadataError(
                f"sharding_indexed: chunk_shape {self.chunk_shape} and shard shape "
                f"{shard_shape} differ in dimensions"
            )
        if any(c <= 0 or s % c for s, c in zip(shard_shape, self.chunk_shape, strict=True)):
            raise MetadataError(
                f"sharding_indexed: chunk_shape {self.chunk_shape} must evenly divide the "
                f"shard shape {shard_shape}"
            )
        if self.index_location not in ("start", "end"):
            raise MetadataError(
                f"sharding_indexed: invalid index_location {shown(self.index_location)}"
            )
        if self.write_order not in ("morton", "C"):
            raise ValueError(f"sharding_indexed: invalid write_order {self.write_order!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "configuration": {
                "chunk_shape": list(self.chunk_shape),
                "codecs": self.inner.to_json(),
                "index_codecs": self.index_codecs.to_json(),
                "index_location": self.index_location,
            },
        }

    # -- geometry ----------------------------------------------------------------------------

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_spec.shape, self.chunk_shape, strict=True))

    @property
    def index_nbytes(self) -> int:
        return self.index_codecs.nbytes(self.chunks_per_shard)

    def max_encoded_size(self, spec: ArraySpec) -> int | None:
        """Every inner chunk at its most, and the index."""
        inner = self.inner.max_encoded_size()
        return (
            None if inner is None else math.prod(self.chunks_per_shard) * inner + self.index_nbytes
        )

    def check_lengths(self, index: ShardIndex) -> None:
        """``ShardFormatError`` when an entry is longer than any encoding of an inner chunk
        could be: such a range is never read."""
        inner = self.inner.max_encoded_size()
        present = index.present()
        if inner is not None and present.any() and int(index.lengths[present].max()) > inner:
            raise ShardFormatError(
                f"sharding_indexed: an inner chunk is longer than any encoding of it could be "
                f"({inner} bytes)"
            )

    def write_sequence(self) -> np.ndarray:
        """Inner-chunk coordinates in write order, ``(n, ndim)``."""
        cps = self.chunks_per_shard
        if self.write_order == "morton":
            return morton_order_array(cps)
        return np.stack(np.unravel_index(np.arange(math.prod(cps)), cps), axis=1)

    def _targets(self, region: Region) -> list[ChunkPart]:
        """The inner chunks ``region`` touches (inner chunks tile the shard exactly)."""
        return chunk_parts(region, self.shard_spec.shape, self.chunk_shape)

    def _full_region(self) -> Region:
        return tuple(slice(0, s) for s in self.shard_spec.shape)

    def _normalize_region(self, region: Region | None) -> Region:
        if region is None:
            return self._full_region()
        out = []
        for sel, size in zip(region, self.shard_spec.shape, strict=True):
            start, stop, step = sel.indices(size)
            if step != 1:
                raise ValueError("sharding_indexed: only unit-step regions are supported")
            out.append(slice(start, max(start, stop)))
        return tuple(out)

    # -- index ------------------------------------------------------------------------------

    def _index_from_shard(self, data: bytes | memoryview) -> ShardIndex:
        n = self.index_nbytes
        if len(data) < n:
            raise ShardFormatError(f"shard is {len(data)} bytes, shorter than its {n}-byte index")
        view = memoryview(data)
        raw = view[:n] if self.index_location == "start" else view[len(view) - n :]
        index = ShardIndex.decode(raw, self.chunks_per_shard, self.index_codecs)
        if self.index_location == "start":
            index.validate(n, len(view))
        else:
            index.validate(0, len(view) - n)
        self.check_lengths(index)
        return index

    # -- encoding ----------------------------------------------------------------------------

    def _blocked(self, array: np.ndarray) -> np.ndarray:
        """View of a shard array as ``chunks_per_shard + chunk_shape`` (no copy)."""
        split: list[int] = []
        for n, c in zip(self.chunks_per_shard, self.chunk_shape, strict=True):
            split += [n, c]
        nd = len(self.chunk_shape)
        return array.reshape(split).transpose([*range(0, 2 * nd, 2), *range(1, 2 * nd, 2)])

    def _nonfill_mask(self, blocked: np.ndarray) -> np.ndarray:
        nd = len(self.chunk_shape)
        axes = tuple(range(nd, 2 * nd))
        fill = self.shard_spec.fill_value
        if blocked.dtype.kind == "f" and np.isnan(fill):
            return ~np.all(np.isnan(blocked), axis=axes)
        if blocked.dtype.kind in "biu" and not fill:
            return np.any(blocked, axis=axes)
        if blocked.dtype.kind == "c" and np.isnan(np.asarray(fill)).any():
            mask = np.zeros(self.chunks_per_shard, dtype=bool)
            for coords in np.ndindex(*self.chunks_per_shard):
                mask[coords] = not is_fill(blocked[coords], fill)
            return mask
        return np.any(blocked != np.asarray(fill, dtype=blocked.dtype), axis=axes)

    def _assemble(
        self,
        chunks: Mapping[Coords, bytes | memoryview],
        prefix: bytes | memoryview = b"",
    ) -> bytes | None:
        """A shard holding ``chunks`` in write order; None when there are none.

        ``prefix`` (append mode) is kept byte for byte before the new chunks.
        """
        if not chunks:
            return None
        index = ShardIndex.empty(self.chunks_per_shard)
        parts: list[bytes | memoryview] = [prefix] if len(prefix) else []
        offset = len(prefix) + (self.index_nbytes if self.index_location == "start" else 0)
        for coords in self._sorted(chunks):
            data = chunks[coords]
            index.set(coords, offset, len(data))
            parts.append(data)
            offset += len(data)
        encoded_index = index.encode(self.index_codecs)
        if self.index_location == "start":
            parts.insert(0, encoded_index)
        else:
            parts.append(encoded_index)
        return b"".join(parts)

    def _encode_chunks(
        self, arrays: Mapping[Coords, np.ndarray], parallel: bool
    ) -> dict[Coords, bytes]:
        coords = list(arrays)
        encoded = self.inner.encode_many([arrays[c] for c in coords], parallel)
        return dict(zip(coords, encoded, strict=True))

    def encode_shard(self, array: np.ndarray, parallel: bool = True) -> bytes | None:
        """Encode a whole shard; None when every inner chunk equals the fill value."""
        if array.shape != self.shard_spec.shape:
            raise ValueError(f"shard array shape {array.shape} != {self.shard_spec.shape}")
        blocked = self._blocked(array)
        mask = self._nonfill_mask(blocked)
        arrays = {
            tuple(int(c) for c in coords): blocked[tuple(coords)] for coords in np.argwhere(mask)
        }
        return self._assemble(self._encode_chunks(arrays, parallel))

    def encode(self, array: np.ndarray, spec: ArraySpec) -> bytes:
        encoded = self.encode_shard(array)
        if encoded is None:  # as a nested codec we must return bytes: an index of empties
            encoded = ShardIndex.empty(self.chunks_per_shard).encode(self.index_codecs)
        return encoded

    # -- decoding ----------------------------------------------------------------------------

    def _place(
        self,
        targets: Sequence[ChunkPart],
        chunk_bytes: Mapping[Coords, bytes | memoryview],
        out: np.ndarray,
        parallel: bool,
    ) -> None:
        fill = self.shard_spec.fill_value

        def one(target: ChunkPart) -> None:
            data = chunk_bytes.get(target.coords)
            if data is None:
                out[target.out_sel] = fill
            else:
                out[target.out_sel] = self.inner.decode(data)[target.region]

        parallel_map(one, targets, parallel)

    def decode_region(
        self,
        data: bytes | memoryview,
        region: Region | None = None,
        out: np.ndarray | None = None,
        parallel: bool = True,
    ) -> np.ndarray:
        """Decode ``region`` (default: all) of an encoded shard held in memory."""
        region = self._normalize_region(region)
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.empty(shape, dtype=self.shard_spec.dtype)
        index = self._index_from_shard(data)
        targets = self._targets(region)
        view = memoryview(data)
        chunk_bytes: dict[Coords, memoryview] = {}
        for t in targets:
            entry = index.get(t.coords)
            if entry is not None:
                chunk_bytes[t.coords] = view[entry[0] : entry[0] + entry[1]]
        self._place(targets, chunk_bytes, out, parallel)
        return out

    def decode(self, data: bytes | memoryview, spec: ArraySpec) -> np.ndarray:
        return self.decode_region(data)

    def decode_chunk(self, data: bytes | memoryview, coords: Sequence[int]) -> np.ndarray | None:
        """One inner chunk of an in-memory shard, or None when it is empty."""
        index = self._index_from_shard(data)
        entry = index.get(coords)
        if entry is None:
            return None
        return self.inner.decode(memoryview(data)[entry[0] : entry[0] + entry[1]])

    # -- merging (partial writes) ------------------------------------------------------------

    def _updates(
        self,
        old: bytes | None,
        old_index: ShardIndex | None,
        value: np.ndarray,
        region: Region,
        parallel: bool,
    ) -> dict[Coords, bytes | None]:
        """Encoded new inner chunks for ``region`` (None: now all fill value, drop it)."""
        view = memoryview(old) if old is not None else memoryview(b"")
        fill = self.shard_spec.fill_value

        def new_chunk(t: ChunkPart) -> tuple[Coords, bytes | None]:
            if t.covers:
                chunk = value[t.out_sel]
            else:  # merge into the stored chunk
                entry = old_index.get(t.coords) if old_index is not None else None
                if entry is None:
                    chunk = np.full(self.chunk_shape, fill, dtype=self.shard_spec.dtype)
                else:
                    chunk = self.inner.decode(view[entry[0] : entry[0] + entry[1]]).copy()
                chunk[t.region] = value[t.out_sel]
            if is_fill(chunk, fill):
                return t.coords, None
            return t.coords, self.inner.encode(chunk)

        return dict(parallel_map(new_chunk, self._targets(region), parallel))

    def _sorted(self, coords: Iterable[Coords]) -> list[Coords]:
        """``coords`` in write order."""
        if self.write_order == "C":
            return sorted(coords)
        cps = self.chunks_per_shard
        rank = morton_rank(cps)
        return sorted(coords, key=lambda c: int(rank[np.ravel_multi_index(c, cps)]))

    def _merge(
        self,
        old: bytes | None,
        old_index: ShardIndex | None,
        updates: Mapping[Coords, bytes | None],
        mode: WriteMode,
    ) -> bytes | None:
        """The new shard value after applying ``updates`` (None: delete the shard)."""
        if old is None or old_index is None:
            return self._assemble({c: b for c, b in updates.items() if b is not None})
        view = memoryview(old)
        if mode == "append":
            # Old bytes (old index included) stay as they are; new chunks and index follow.
            index = old_index.copy()
            parts: list[bytes | memoryview] = [view]
            offset = len(view)
            for c in self._sorted(updates):
                data = updates[c]
                if data is None:
                    index.clear(c)
                else:
                    index.set(c, offset, len(data))
                    parts.append(data)
                    offset += len(data)
            if index.is_empty():
                return None
            parts.append(index.encode(self.index_codecs))
            return b"".join(parts)
        chunks: dict[Coords, bytes | memoryview] = {}
        for c, offset, nbytes in self._stored(old_index):
            chunks[c] = view[offset : offset + nbytes]
        for c, data in updates.items():
            if data is None:
                chunks.pop(c, None)
            else:
                chunks[c] = data
        return self._assemble(chunks)

    @staticmethod
    def _stored(index: ShardIndex) -> Iterator[tuple[Coords, int, int]]:
        present = index.present()
        offsets = index.offsets[present].tolist()
        lengths = index.lengths[present].tolist()
        for coords, offset, nbytes in zip(
            np.argwhere(present).tolist(), offsets, lengths, strict=True
        ):
            yield tuple(coords), offset, nbytes

    def iter_stored_chunks(self, data: bytes | memoryview) -> Iterator[tuple[Coords, int, int]]:
        """``(coords, offset, nbytes)`` of every stored inner chunk of an in-memory shard."""
        return self._stored(self._index_from_shard(data))
