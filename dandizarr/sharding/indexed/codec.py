"""The ``sharding_indexed`` codec against a ``KeyValueStore``.

Byte-range reads of the index and of just the needed inner chunks, an optional index cache,
range merging, and read-modify-write or append-only partial writes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dandizarr.sharding.index import ShardFormatError, ShardIndex
from dandizarr.sharding.indexed.in_memory import Coords, InMemoryShardingCodec, WriteMode
from dandizarr.sharding.indexed.index_cache import IndexCache
from dandizarr.sharding.regions import ChunkPart, Region
from dandizarr.sharding.store import KeyValueStore, VersionMismatch

__all__ = ["ShardingCodec", "coalesce_ranges"]


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


class ShardingCodec(InMemoryShardingCodec):
    """``sharding_indexed`` resolved for one shard spec, with reads and writes through a store."""

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
        self.check_lengths(index)  # no inner range longer than an honest chunk is read
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
            whole = self._read_whole(store, key, region, out, parallel)
            if whole is not None:
                return whole
            # Longer than a compact shard (append-mode writes leave dead bytes): by its index.
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
        whole = self._read_whole(store, key, region, out, parallel)
        if whole is None:
            raise ShardFormatError(f"{key}: rewritten while read, and too long to read whole")
        return whole

    def _read_whole(
        self,
        store: KeyValueStore,
        key: str,
        region: Region,
        out: np.ndarray,
        parallel: bool,
    ) -> np.ndarray | None:
        """The region from one read of the whole shard; None, having read no more than a
        compact shard's bytes, when the shard is longer than any compact encoding of it."""
        limit = self.max_encoded_size(self.shard_spec)
        if limit is None:
            data = store.get(key)
        else:
            got = store.get_range(key, 0, limit + 1)
            data = None if got is None else got.data
            if data is not None and len(data) > limit:
                return None
        if data is None:
            out[...] = self.shard_spec.fill_value
            return out
        return self.decode_region(data, region, out, parallel)

    def _fetch_chunks(
        self,
        store: KeyValueStore,
        key: str,
        targets: Sequence[ChunkPart],
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
    def _wanted(index: ShardIndex, targets: Sequence[ChunkPart]) -> list[tuple[Coords, int, int]]:
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
