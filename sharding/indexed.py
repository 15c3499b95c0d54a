"""The Zarr v3 ``sharding_indexed`` codec: many inner chunks and an index in one stored value.

Two ways in:

* as an ``array -> bytes`` codec (``encode`` / ``decode`` a whole shard), which is what nested
  sharding and generic pipelines use;
* against a ``KeyValueStore`` (``read_region`` / ``write_region``), with byte-range reads of
  the index and of just the needed inner chunks, an optional index cache, range merging, and
  read-modify-write or append-only partial writes.

Write-strategy knobs (``write_order``, ``coalesce_gap``) are runtime settings: the spec keeps
them out of the metadata, so ``to_json`` never includes them.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from sharding.codecs import (
    ArrayBytesCodec,
    ArraySpec,
    CodecLike,
    CodecPipeline,
    is_fill,
    parallel_map,
)
from sharding.index import IndexCodecs, ShardFormatError, ShardIndex
from sharding.morton import morton_order_array, morton_rank
from sharding.store import KeyValueStore, VersionMismatch

__all__ = [
    "IndexCache",
    "ShardingCodec",
    "coalesce_ranges",
]

Region = tuple[slice, ...]
Coords = tuple[int, ...]
WriteMode = Literal["rewrite", "append"]


# ---------------------------------------------------------------------------------------------
# Index cache


@dataclass
class IndexCache:
    """LRU of decoded shard indexes, each tagged with the store version it was read at.

    A cached index is only ever used together with a read conditioned on that version, so an
    entry for a rewritten shard costs one failed request, never stale data.
    """

    maxsize: int = 4096
    _entries: OrderedDict[str, tuple[str, ShardIndex]] = field(
        default_factory=OrderedDict, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, key: str) -> tuple[str, ShardIndex] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, version: str, index: ShardIndex) -> None:
        with self._lock:
            self._entries[key] = (version, index)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def coalesce_ranges(
    ranges: Sequence[tuple[int, int]], gap: int
) -> list[tuple[int, int, list[int]]]:
    """Merge ``[start, end)`` ranges whose gap is at most ``gap`` bytes.

    Returns ``(start, end, members)`` with ``members`` the indices into ``ranges``.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    merged: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, end = ranges[i]
        if merged and start - merged[-1][1] <= gap:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), [*last[2], i])
        else:
            merged.append((start, end, [i]))
    return merged


# One lock per (store, shard key): read-modify-write of a shard is serialized in this process.
# Writers in other processes must coordinate themselves (the store has no conditional put).
_key_locks_guard = threading.Lock()
_key_locks: dict[tuple[int, str], threading.Lock] = {}


def _key_lock(store: KeyValueStore, key: str) -> threading.Lock:
    with _key_locks_guard:
        return _key_locks.setdefault((id(store), key), threading.Lock())


class _Retry(Exception):
    """The shard changed (or vanished) between the index read and the chunk read."""


@dataclass(frozen=True, slots=True)
class _Target:
    coords: Coords  # inner chunk position in the shard
    chunk_sel: Region  # part of the inner chunk
    out_sel: Region  # where it goes in the output region
    full: bool  # the selection covers the whole inner chunk


# ---------------------------------------------------------------------------------------------
# The codec


@dataclass(frozen=True, eq=False)
class ShardingCodec(ArrayBytesCodec):
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
            raise ValueError(
                f"sharding_indexed: chunk_shape {self.chunk_shape} and shard shape "
                f"{shard_shape} differ in dimensions"
            )
        if any(c <= 0 or s % c for s, c in zip(shard_shape, self.chunk_shape, strict=True)):
            raise ValueError(
                f"sharding_indexed: chunk_shape {self.chunk_shape} must evenly divide the "
                f"shard shape {shard_shape}"
            )
        if self.index_location not in ("start", "end"):
            raise ValueError(f"sharding_indexed: invalid index_location {self.index_location!r}")
        if self.write_order not in ("morton", "C"):
            raise ValueError(f"sharding_indexed: invalid write_order {self.write_order!r}")

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        shard_spec: ArraySpec,
        chunk_shape: Sequence[int],
        codecs: Sequence[CodecLike] = ({"name": "bytes", "configuration": {"endian": "little"}},),
        index_codecs: IndexCodecs | Sequence[Mapping[str, Any] | str] | None = None,
        index_location: Literal["start", "end"] = "end",
        **runtime: Any,
    ) -> ShardingCodec:
        chunk = tuple(int(c) for c in chunk_shape)
        inner_spec = ArraySpec(chunk, shard_spec.dtype, shard_spec.fill_value)
        if index_codecs is None:
            parsed = IndexCodecs()
        elif isinstance(index_codecs, IndexCodecs):
            parsed = index_codecs
        else:
            parsed = IndexCodecs.from_json(index_codecs)
        return cls(
            shard_spec=shard_spec,
            chunk_shape=chunk,
            inner=CodecPipeline.from_json(codecs, inner_spec),
            index_codecs=parsed,
            index_location=index_location,
            **runtime,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], shard_spec: ArraySpec) -> ShardingCodec:
        try:
            chunk_shape = config["chunk_shape"]
            codecs = config["codecs"]
        except KeyError as missing:
            raise ValueError(f"sharding_indexed: configuration lacks {missing}") from None
        return cls.create(
            shard_spec,
            chunk_shape,
            codecs,
            config.get("index_codecs") or None,
            config.get("index_location", "end"),
        )

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

    def write_sequence(self) -> np.ndarray:
        """Inner-chunk coordinates in write order, ``(n, ndim)``."""
        cps = self.chunks_per_shard
        if self.write_order == "morton":
            return morton_order_array(cps)
        return np.stack(np.unravel_index(np.arange(math.prod(cps)), cps), axis=1)

    def _targets(self, region: Region) -> list[_Target]:
        per_dim: list[list[tuple[int, slice, slice, bool]]] = []
        for sel, c in zip(region, self.chunk_shape, strict=True):
            start, stop = sel.start, sel.stop
            items = []
            for i in range(start // c, (stop - 1) // c + 1 if stop > start else start // c):
                lo, hi = max(start - i * c, 0), min(stop - i * c, c)
                out = slice(i * c + lo - start, i * c + hi - start)
                items.append((i, slice(lo, hi), out, lo == 0 and hi == c))
            per_dim.append(items)
        return [
            _Target(
                tuple(d[0] for d in combo),
                tuple(d[1] for d in combo),
                tuple(d[2] for d in combo),
                all(d[3] for d in combo),
            )
            for combo in itertools.product(*per_dim)
        ]

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

    # -- index I/O ---------------------------------------------------------------------------

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
        return index

    def _read_index(self, store: KeyValueStore, key: str) -> tuple[ShardIndex, str | None] | None:
        n = self.index_nbytes
        if self.index_location == "start":
            got = store.get_range(key, 0, n)
        else:
            got = store.get_range(key, -n)
        if got is None:
            return None
        index = ShardIndex.decode(got.data, self.chunks_per_shard, self.index_codecs)
        # The shard size is unknown after a suffix read; the chunk read checks the far end.
        index.validate(n if self.index_location == "start" else 0, None)
        return index, got.version

    def read_index(
        self, store: KeyValueStore, key: str, cache: IndexCache | None = None
    ) -> ShardIndex | None:
        """The shard's index (one range read), or None when the shard is absent."""
        got = self._read_index(store, key)
        if got is None:
            if cache is not None:
                cache.drop(key)
            return None
        if cache is not None and got[1] is not None:
            cache.put(key, got[1], got[0])
        return got[0]

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
        targets: Sequence[_Target],
        chunk_bytes: Mapping[Coords, bytes | memoryview],
        out: np.ndarray,
        parallel: bool,
    ) -> None:
        fill = self.shard_spec.fill_value

        def one(target: _Target) -> None:
            data = chunk_bytes.get(target.coords)
            if data is None:
                out[target.out_sel] = fill
            else:
                out[target.out_sel] = self.inner.decode(data)[target.chunk_sel]

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

    # -- store reads -------------------------------------------------------------------------

    def _read_ranges(
        self,
        store: KeyValueStore,
        key: str,
        wanted: Sequence[tuple[Coords, int, int]],
        version: str | None,
    ) -> dict[Coords, memoryview]:
        """Fetch ``(coords, offset, nbytes)`` ranges, merged, each read tied to ``version``."""
        ranges = [(off, off + n) for _, off, n in wanted]
        out: dict[Coords, memoryview] = {}
        for start, end, members in coalesce_ranges(ranges, self.coalesce_gap):
            got = store.get_range(key, start, end, if_version=version)
            if got is None:
                raise _Retry(key)  # deleted since the index was read
            if len(got.data) != end - start:
                raise ShardFormatError(
                    f"{key}: inner chunk range [{start}, {end}) runs past the end of the shard"
                )
            view = memoryview(got.data)
            for i in members:
                a, b = ranges[i]
                out[wanted[i][0]] = view[a - start : b - start]
        return out

    def read_region(
        self,
        store: KeyValueStore,
        key: str,
        region: Region | None = None,
        out: np.ndarray | None = None,
        *,
        cache: IndexCache | None = None,
        parallel: bool = True,
    ) -> np.ndarray:
        """Read ``region`` of the shard at ``key`` (absent shard: fill value).

        Reading every inner chunk is one ``get``. Otherwise: index (from ``cache`` when it has
        it), then the needed chunk ranges merged across gaps up to ``coalesce_gap``, every
        range read conditioned on the index's version.
        """
        region = self._normalize_region(region)
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.empty(shape, dtype=self.shard_spec.dtype)
        targets = self._targets(region)
        if len(targets) == math.prod(self.chunks_per_shard):
            return self._read_whole(store, key, region, out, parallel)
        for _attempt in range(3):
            try:
                chunk_bytes = self._fetch_chunks(store, key, targets, cache)
            except (_Retry, VersionMismatch):
                if cache is not None:
                    cache.drop(key)
                continue
            if chunk_bytes is None:
                out[...] = self.shard_spec.fill_value
                return out
            self._place(targets, chunk_bytes, out, parallel)
            return out
        # Rewritten under us repeatedly: one whole-value read is atomic.
        return self._read_whole(store, key, region, out, parallel)

    def _read_whole(
        self,
        store: KeyValueStore,
        key: str,
        region: Region,
        out: np.ndarray,
        parallel: bool,
    ) -> np.ndarray:
        data = store.get(key)
        if data is None:
            out[...] = self.shard_spec.fill_value
            return out
        return self.decode_region(data, region, out, parallel)

    def _fetch_chunks(
        self,
        store: KeyValueStore,
        key: str,
        targets: Sequence[_Target],
        cache: IndexCache | None,
    ) -> dict[Coords, memoryview] | None:
        """Bytes of the targets' stored chunks; None when the shard does not exist."""
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            wanted = self._wanted(cached[1], targets)
            if wanted:
                return self._read_ranges(store, key, wanted, cached[0])
            # Nothing stored there per the cached index: only a fresh index can confirm it.
        got = self._read_index(store, key)
        if got is None:
            if cache is not None:
                cache.drop(key)
            return None
        index, version = got
        if cache is not None and version is not None:
            cache.put(key, version, index)
        wanted = self._wanted(index, targets)
        return self._read_ranges(store, key, wanted, version) if wanted else {}

    @staticmethod
    def _wanted(index: ShardIndex, targets: Sequence[_Target]) -> list[tuple[Coords, int, int]]:
        wanted = []
        for t in targets:
            entry = index.get(t.coords)
            if entry is not None:
                wanted.append((t.coords, entry[0], entry[1]))
        return wanted

    def read_chunk(
        self,
        store: KeyValueStore,
        key: str,
        coords: Sequence[int],
        *,
        cache: IndexCache | None = None,
    ) -> np.ndarray:
        """One whole inner chunk (fill value when absent)."""
        region = tuple(
            slice(i * c, (i + 1) * c) for i, c in zip(coords, self.chunk_shape, strict=True)
        )
        return self.read_region(store, key, region, cache=cache)

    # -- store writes ------------------------------------------------------------------------

    def write_region(
        self,
        store: KeyValueStore,
        key: str,
        value: np.ndarray | Any,
        region: Region | None = None,
        *,
        mode: WriteMode = "rewrite",
        cache: IndexCache | None = None,
        parallel: bool = True,
    ) -> None:
        """Write ``value`` into ``region`` of the shard at ``key``.

        A write covering the whole shard encodes it without reading. Otherwise the shard is
        read once; in ``"rewrite"`` mode a compact shard is written in write order (untouched
        chunks are copied, not re-encoded); in ``"append"`` mode (``index_location`` end) the
        old bytes are kept as they are, followed by the new chunks and a new index. Chunks
        that end up all fill value are dropped; a shard left with none is deleted.
        """
        if mode not in ("rewrite", "append"):
            raise ValueError(f"invalid write mode {mode!r}")
        if mode == "append" and self.index_location != "end":
            raise ValueError("append mode needs index_location 'end'")
        region = self._normalize_region(region)
        shape = tuple(s.stop - s.start for s in region)
        value = np.broadcast_to(np.asarray(value, dtype=self.shard_spec.dtype), shape)
        try:
            with _key_lock(store, key):
                if region == self._full_region() and mode == "rewrite":
                    encoded = self.encode_shard(np.ascontiguousarray(value), parallel)
                else:
                    old = store.get(key)
                    old_index = self._index_from_shard(old) if old is not None else None
                    updates = self._updates(old, old_index, value, region, parallel)
                    encoded = self._merge(old, old_index, updates, mode)
                self._store(store, key, encoded)
        finally:
            if cache is not None:
                cache.drop(key)

    @staticmethod
    def _store(store: KeyValueStore, key: str, encoded: bytes | None) -> None:
        if encoded is None:
            store.delete(key)
        else:
            store.set(key, encoded)

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

        def new_chunk(t: _Target) -> tuple[Coords, bytes | None]:
            if t.full:
                chunk = value[t.out_sel]
            else:  # merge into the stored chunk
                entry = old_index.get(t.coords) if old_index is not None else None
                if entry is None:
                    chunk = np.full(self.chunk_shape, fill, dtype=self.shard_spec.dtype)
                else:
                    chunk = self.inner.decode(view[entry[0] : entry[0] + entry[1]]).copy()
                chunk[t.chunk_sel] = value[t.out_sel]
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

    def erase_chunks(
        self,
        store: KeyValueStore,
        key: str,
        coords: Iterable[Sequence[int]],
        *,
        mode: WriteMode = "rewrite",
        cache: IndexCache | None = None,
    ) -> None:
        """Delete inner chunks (they read back as fill); the last one deletes the shard."""
        if mode == "append" and self.index_location != "end":
            raise ValueError("append mode needs index_location 'end'")
        updates: dict[Coords, bytes | None] = {tuple(int(i) for i in c): None for c in coords}
        try:
            with _key_lock(store, key):
                old = store.get(key)
                if old is None:
                    return
                old_index = self._index_from_shard(old)
                self._store(store, key, self._merge(old, old_index, updates, mode))
        finally:
            if cache is not None:
                cache.drop(key)

    def iter_stored_chunks(self, data: bytes | memoryview) -> Iterator[tuple[Coords, int, int]]:
        """``(coords, offset, nbytes)`` of every stored inner chunk of an in-memory shard."""
        return self._stored(self._index_from_shard(data))
